SET synchronous_commit = {commits};
SET default_transaction_isolation = 'read committed';
SET idle_in_transaction_session_timeout = {idle_ms};
