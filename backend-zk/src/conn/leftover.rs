//! Nodes of ours that must go but could not be deleted yet, for the session's monitor to retry
//! ([`crate::conn::session::Session::remove_later`]).

use zookeeper_client as zk;

use crate::layout;

/// A node of ours that must go but could not be deleted yet (a withdrawal during a connection
/// loss, a semaphore's internal lock after the grant): the session's monitor retries it
/// ([`crate::conn::session::Session::remove_later`]), and `Locker::shutdown` tries once more.
#[derive(Clone, Debug)]
pub(crate) enum Leftover {
    /// The node at this path.
    Node(String),
    /// Whatever node a create whose answer never came made: the children of `parent` whose name
    /// starts with `marker`, the attempt's protected prefix `_c_<uuid>-`.
    Created {
        /// The queue the create was sent to.
        parent: String,
        /// The attempt's protected prefix.
        marker: String,
    },
}

impl Leftover {
    /// Deletes it; what is still left, and the error that left it, otherwise.
    pub(crate) async fn remove(self, client: &zk::Client) -> Option<(Leftover, zk::Error)> {
        match self {
            Leftover::Node(path) => match client.delete(&path, None).await {
                Ok(()) | Err(zk::Error::NoNode) => None,
                Err(e) => Some((Leftover::Node(path), e)),
            },
            Leftover::Created { parent, marker } => match client.get_children(&parent).await {
                Ok((children, _)) => delete_protected(client, &parent, &marker, &children).await,
                Err(zk::Error::NoNode) => None,
                Err(e) => Some((Leftover::Created { parent, marker }, e)),
            },
        }
    }
}

/// Deletes the `children` of `parent` that start with `marker` (one attempt's node, if its create
/// was applied). A delete that fails is left over as the whole search, which finds that node again.
pub(crate) async fn delete_protected(
    client: &zk::Client,
    parent: &str,
    marker: &str,
    children: &[String],
) -> Option<(Leftover, zk::Error)> {
    for child in children.iter().filter(|c| c.starts_with(marker)) {
        match client.delete(&layout::child_path(parent, child), None).await {
            Ok(()) | Err(zk::Error::NoNode) => {}
            Err(e) => {
                let leftover = Leftover::Created {
                    parent: parent.to_owned(),
                    marker: marker.to_owned(),
                };
                return Some((leftover, e));
            }
        }
    }
    None
}
