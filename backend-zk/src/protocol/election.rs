//! Who leads an election, once ([`read_leader`]) or as the server pushes every change
//! ([`observe`]). Candidates are Curator `LeaderLatch` nodes, `_c_<uuid>-latch-<seq>` under
//! `<namespace>/<encoded>.elect`, holding the candidate's value (Curator: its participant id); the
//! first by sequence leads, its `czxid` is the term. Campaigning is the queue of every other kind
//! ([`crate::protocol::take`]).
//!
//! Reading the leader: `getChildren`, then `getData` of the first candidate (2 round trips), on
//! an ensemble behind a pipelined `sync` (no round trip more), so that a follower that lags
//! behind never shows an earlier leader (within a session the server never answers from an
//! older state than the session saw; a new session may land on any server).
//! Observing: the same with a children watch on the election node (an `exists` watch while the
//! node is missing); each event (a candidate joined or left) reads again, and only a change of
//! leader is sent to the [`LeaderWatch`]. The observer rides out disconnections (reading again
//! once reconnected: the client re-registers the watch, and the read costs little) and session
//! expiry (a new session of the backend), and ends when the watch is dropped or the backend is.

use std::sync::Arc;
use std::time::Duration;

use locksmith_core::{Leader, LeaderWatch, LockError};
use tokio::sync::watch;
use zookeeper_client as zk;

use crate::conn::session::Session;
use crate::conn::sessions::Sessions;
use crate::error::{is_session_gone, is_transient};
use crate::layout;

/// The pause before observing again after a connection error.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// The pause before observing again after an error the server will likely repeat (an ACL that
/// refuses us, a session that cannot be opened).
const ERROR_PAUSE: Duration = Duration::from_secs(1);

/// The leader of the election whose candidates are the children of `path` (`None`: nobody), read
/// behind a `sync` on an ensemble ([`Session::confirmed_read`]): a follower that lags behind (a
/// new session may connect to one) would show an earlier leader.
pub(crate) async fn read_leader(session: &Session, path: &str) -> Result<Option<Leader>, zk::Error> {
    let client = &session.client;
    session
        .confirmed_read(path, || async {
            match client.list_children(path).await {
                Ok(children) => first_readable(client, path, layout::sorted(children)).await,
                Err(zk::Error::NoNode) => Ok(None),
                Err(e) => Err(e),
            }
        })
        .await
}

/// The first of `candidates` (in queue order) whose node can still be read, as Curator's
/// `LeaderSelector.getLeader` does: one that left since the listing is skipped (the next one
/// leads now, or will once it notices).
async fn first_readable(client: &zk::Client, path: &str, candidates: Vec<String>) -> Result<Option<Leader>, zk::Error> {
    for candidate in candidates {
        let node = layout::child_path(path, &candidate);
        match client.get_data(&node).await {
            Ok((data, stat)) => {
                return Ok(Some(Leader {
                    value: String::from_utf8_lossy(&data).into_owned(),
                    term: u64::try_from(stat.czxid).unwrap_or(0),
                    holder_id: node,
                }))
            }
            Err(zk::Error::NoNode) => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(None)
}

/// The leader, with a watch that fires on the next change of the candidates (or, while the
/// election node does not exist, on its creation); behind a `sync`, as [`read_leader`].
async fn watch_leader(session: &Session, path: &str) -> Result<(Option<Leader>, zk::OneshotWatcher), zk::Error> {
    session
        .confirmed_read(path, || watch_leader_now(&session.client, path))
        .await
}

/// [`watch_leader`]'s reads.
async fn watch_leader_now(client: &zk::Client, path: &str) -> Result<(Option<Leader>, zk::OneshotWatcher), zk::Error> {
    loop {
        match client.list_and_watch_children(path).await {
            Ok((children, watcher)) => {
                let leader = first_readable(client, path, layout::sorted(children)).await?;
                return Ok((leader, watcher));
            }
            Err(zk::Error::NoNode) => match client.check_and_watch_stat(path).await? {
                (None, watcher) => return Ok((None, watcher)),
                (Some(_), _) => continue, // created meanwhile: list it
            },
            Err(e) => return Err(e),
        }
    }
}

/// Starts observing the election at `path`: `first` is the leader just read; a task of the
/// backend's sends every change. It ends when the returned watch is dropped or `alive` closes
/// (the backend was dropped).
pub(crate) fn observe(
    sessions: Arc<Sessions>,
    path: String,
    first: Option<Leader>,
    mut alive: watch::Receiver<()>,
) -> LeaderWatch {
    let (tx, rx) = watch::channel(first);
    let task = tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = tx.closed() => return,
                _ = alive.changed() => return, // never sent: only the backend's drop ends it
                ended = observe_once(&sessions, &path, &tx) => if ended { return },
            }
        }
    });
    LeaderWatch::new(rx, task)
}

/// One round of the observation: read the leader with a watch, send it if it changed, and wait
/// for the watch to fire or the connection to come back after a loss. `true` when the
/// observation is over: the backend was shut down (it opens no session any more).
async fn observe_once(sessions: &Sessions, path: &str, tx: &watch::Sender<Option<Leader>>) -> bool {
    let session = match sessions.session().await {
        Ok(session) => session,
        Err(LockError::Closed) => return true,
        Err(e) => {
            tracing::warn!(election = %path, error = %e, "cannot observe the election: no session");
            tokio::time::sleep(ERROR_PAUSE).await;
            return false;
        }
    };
    let mut states = session.client.state_watcher();
    match watch_leader(&session, path).await {
        Ok((leader, watcher)) => {
            tx.send_if_modified(|seen| {
                let changed = *seen != leader;
                if changed {
                    tracing::debug!(election = %path, leader = ?leader, "the leader changed");
                    seen.clone_from(&leader);
                }
                changed
            });
            tokio::select! {
                _ = watcher.changed() => {}
                _ = reconnected(&mut states) => {}
            }
        }
        // The next round opens a new session, or the connection is back by then.
        Err(e) if is_session_gone(&e) || is_transient(&e) => tokio::time::sleep(RETRY_PAUSE).await,
        Err(e) => {
            tracing::warn!(election = %path, error = %e, "cannot observe the election; trying again");
            tokio::time::sleep(ERROR_PAUSE).await;
        }
    }
    false
}

/// Resolves once the session is connected again after a disconnection, or has ended.
async fn reconnected(states: &mut zk::StateWatcher) {
    let mut away = false;
    loop {
        match states.changed().await {
            state if state.is_terminated() => return,
            zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly if away => return,
            zk::SessionState::Disconnected => away = true,
            _ => {}
        }
    }
}
