//! A statement's parameters owned by its request ([`Params`]), so that the request can move into
//! a task of its own when its caller stops polling it (`Link::in_caller`).

use tokio_postgres::types::ToSql;

use super::Conn;

/// A statement's parameters, owned: their references in order, with the locker's own values
/// (`conn`'s owner id, process id and host) among them where the statement takes them.
pub(crate) trait Params: Send + 'static {
    /// The parameters' references, in the statement's order.
    fn refs<'a>(&'a self, conn: &'a Conn) -> Vec<&'a (dyn ToSql + Sync)>;
}

/// Parameters given as a tuple of owned values, in order.
macro_rules! tuple_params {
    ($($t:ident $i:tt),*) => {
        impl<$($t: ToSql + Sync + Send + 'static),*> Params for ($($t,)*) {
            fn refs<'a>(&'a self, _: &'a Conn) -> Vec<&'a (dyn ToSql + Sync)> {
                vec![$(&self.$i),*]
            }
        }
    };
}

tuple_params!();
tuple_params!(A 0);
tuple_params!(A 0, B 1);
tuple_params!(A 0, B 1, C 2);
tuple_params!(A 0, B 1, C 2, D 3);
tuple_params!(A 0, B 1, C 2, D 3, E 4);
tuple_params!(A 0, B 1, C 2, D 3, E 4, F 5);

/// The parameters of an entry's grant in a lock's row (`grant_in_row`, `try_in_row`): the lock,
/// the entry, this locker, the lease's TTL (ms), this process and host.
pub(crate) struct InRow {
    pub segment: String,
    pub id: String,
    pub ttl_ms: i64,
}

impl Params for InRow {
    fn refs<'a>(&'a self, conn: &'a Conn) -> Vec<&'a (dyn ToSql + Sync)> {
        vec![
            &self.segment,
            &self.id,
            &conn.owner_id,
            &self.ttl_ms,
            &conn.pid,
            &conn.host,
        ]
    }
}

/// The parameters of this locker's heartbeat (`beat`): this locker, for how long (ms), this
/// process and host.
pub(crate) struct Beat(pub i64);

impl Params for Beat {
    fn refs<'a>(&'a self, conn: &'a Conn) -> Vec<&'a (dyn ToSql + Sync)> {
        vec![&conn.owner_id, &self.0, &conn.pid, &conn.host]
    }
}

/// The parameters of a holder's release in one statement (`leave`): the lock, the entry, and the
/// channel its NOTIFY goes to.
pub(crate) struct Leave {
    pub segment: String,
    pub id: String,
}

impl Params for Leave {
    fn refs<'a>(&'a self, conn: &'a Conn) -> Vec<&'a (dyn ToSql + Sync)> {
        vec![&self.segment, &self.id, &conn.sql.channel]
    }
}
