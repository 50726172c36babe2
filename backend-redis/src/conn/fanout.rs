//! Running one request on every server at once and returning as soon as the answers decide the
//! operation (quorum mode): a dead or slow server does not hold up an operation that a majority
//! has already answered. Servers known to be down are skipped while the others can still form a
//! majority (see [`Node::usable`]).
//!
//! The requests still in flight when the answers suffice are dropped: a request already handed
//! to the connection is still executed by its server, its answer is ignored.

use std::future::Future;

use futures_util::stream::{FuturesUnordered, StreamExt};
use locksmith_core::Result;

use crate::conn::node::Node;

/// Runs `op` on each node; stops once `enough(&answers)` holds (checked after each answer) or
/// every node answered. `answers[i]` is `None` for a node that did not answer in time.
pub(crate) async fn fan_out<'a, T, F, Fut>(
    nodes: &'a [Node],
    op: F,
    mut enough: impl FnMut(&[Option<Result<T>>]) -> bool,
) -> Vec<Option<Result<T>>>
where
    F: Fn(usize, &'a Node) -> Fut,
    Fut: Future<Output = Result<T>> + 'a,
{
    let mut answers: Vec<Option<Result<T>>> = nodes.iter().map(|_| None).collect();
    if nodes.len() == 1 {
        let r = op(0, &nodes[0]).await;
        answers[0] = Some(r);
        return answers;
    }
    // Skip the servers known to be down, unless the others are too few for a majority: then
    // the operation cannot succeed without them anyway, and trying them costs nothing.
    let usable: Vec<bool> = nodes.iter().map(Node::usable).collect();
    let try_all = usable.iter().filter(|u| **u).count() < nodes.len() / 2 + 1;
    let mut pending = FuturesUnordered::new();
    for (i, node) in nodes.iter().enumerate() {
        if try_all || usable[i] {
            let fut = op(i, node);
            pending.push(async move {
                let r = fut.await;
                node.record(&r);
                (i, r)
            });
        } else {
            answers[i] = Some(Err(node.skipped()));
        }
    }
    if enough(&answers) {
        return answers;
    }
    while let Some((i, r)) = pending.next().await {
        answers[i] = Some(r);
        if enough(&answers) {
            break;
        }
    }
    answers
}

/// How many answers are in, and how many of them are `Ok`.
pub(crate) fn counts<T>(answers: &[Option<Result<T>>]) -> (usize, usize) {
    let answered = answers.iter().filter(|a| a.is_some()).count();
    let ok = answers.iter().filter(|a| matches!(a, Some(Ok(_)))).count();
    (answered, ok)
}
