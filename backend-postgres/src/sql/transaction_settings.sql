SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
SET LOCAL synchronous_commit = {commits};
SET LOCAL idle_in_transaction_session_timeout = {idle_ms}
