//! The whole locksmith-core conformance suite, and the semaphore, read-write lock and election
//! suites, as a user whose ACL refuses function libraries (`-function -fcall -fcall_ro`, as some
//! managed Redis services set it): every call is a plain script (`EVALSHA`), the fallback also
//! taken on Redis 6.

mod common;

locksmith_core::conformance_tests!(common::RedisHarness::without_functions().await);
locksmith_core::guarded_tests!(common::RedisHarness::without_functions().await);
locksmith_core::primitive_tests!(common::RedisHarness::without_functions().await);
