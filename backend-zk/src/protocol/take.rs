//! One try at a lock of any kind on one session. A mutex, either side of a read-write lock and an
//! election's leadership each join one queue ([`Recipe::for_request`]) and wait for their turn in
//! it; a semaphore takes its internal lock, then a lease ([`crate::protocol::semaphore`]).

use std::sync::Arc;

use locksmith_core::driver::LockRequest;
use locksmith_core::{Family, LockKind};
use tokio::time::Instant;

use crate::conn::session::Session;
use crate::layout;
use crate::protocol::contender::{new_uuid, Contender, Failure, Granted};
use crate::protocol::recipe::Recipe;
use crate::protocol::semaphore;

/// One try at `req` under `namespace` on `session`: `wait` until `deadline` (then
/// [`Failure::Timeout`]) or, without `wait`, `None` unless the lock is free at once. Everything it
/// created is withdrawn when it ends without the lock, and by `Drop` when it is cancelled.
pub(crate) async fn take(
    session: &Arc<Session>,
    namespace: &str,
    req: &LockRequest,
    wait: bool,
    deadline: Option<Instant>,
) -> Result<Option<Granted>, Failure> {
    match &req.kind {
        LockKind::Permit { permits } => {
            let path = layout::family_path(namespace, Family::Semaphore, &req.name);
            semaphore::take(session, &path, *permits, wait, deadline).await
        }
        _ => {
            let recipe = Recipe::for_request(namespace, req).map_err(Failure::Refused)?;
            let mut contender = Contender::new(session.clone(), recipe, new_uuid());
            let listing = contender.enqueue().await?;
            let until = if wait { deadline } else { Some(Instant::now()) };
            match contender.wait_turn(listing, until).await {
                Ok((node, sent, waited)) => Ok(Some(Granted {
                    contender,
                    node,
                    sent,
                    waited,
                })),
                Err(Failure::Timeout) => {
                    contender.withdraw().await;
                    if wait {
                        Err(Failure::Timeout)
                    } else {
                        Ok(None)
                    }
                }
                Err(f) => Err(f),
            }
        }
    }
}
