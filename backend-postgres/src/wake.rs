//! Wake-ups pushed by the server: one LISTEN connection per locker, on the schema's channel,
//! whose notifications (payload: a lock's segment) wake the tasks of this locker that wait on
//! that lock. Every step that changes a queue NOTIFYs in its transaction, so the notification
//! arrives once the change is committed.
//!
//! When the connection is lost, every waiter is woken (a notification may have been missed) and
//! the hub reconnects, with a growing pause, until it is stopped. A task registers (enables its
//! `Notified`) before its step, so a change after the step always wakes it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::Notify;
use tokio::task::{AbortHandle, JoinHandle};
use tokio_postgres::{AsyncMessage, Client, NoTls};

use crate::config::Config;
use crate::error::pg_error;
use lockcore::Result;

/// The wake-ups of one locker.
#[derive(Debug)]
pub(crate) struct Hub {
    /// One `Notify` per lock segment that a task of this locker waits on.
    locks: Mutex<HashMap<String, Weak<Notify>>>,
    /// The listening task.
    task: Mutex<Option<AbortHandle>>,
}

impl Hub {
    /// Connects the LISTEN connection (an error if the first connection fails) and starts it.
    pub async fn start(config: &Config, channel: &str) -> Result<Arc<Hub>> {
        let hub = Arc::new(Hub {
            locks: Mutex::default(),
            task: Mutex::default(),
        });
        let first = listen(config, channel, Arc::downgrade(&hub)).await?;
        let (config, channel, weak) = (config.clone(), channel.to_owned(), Arc::downgrade(&hub));
        let task = tokio::spawn(async move {
            let mut running = Some(first);
            let mut pause = Duration::from_millis(50);
            loop {
                if let Some((_client, driver)) = running.take() {
                    let _ = driver.await;
                    pause = Duration::from_millis(50);
                }
                let Some(hub) = weak.upgrade() else { return };
                hub.wake(None);
                drop(hub);
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(2));
                match listen(&config, &channel, weak.clone()).await {
                    Ok(driver) => {
                        tracing::debug!("postgres: listening again");
                        if let Some(hub) = weak.upgrade() {
                            hub.wake(None); // what changed while no one listened
                        }
                        running = Some(driver);
                    }
                    Err(e) => tracing::debug!(error = %e, "postgres: the LISTEN connection failed; retrying"),
                }
            }
        });
        *hub.task.lock().unwrap_or_else(|e| e.into_inner()) = Some(task.abort_handle());
        Ok(hub)
    }

    /// The `Notify` that the changes of lock `segment` wake.
    pub fn lock(&self, segment: &str) -> Arc<Notify> {
        let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(notify) = locks.get(segment).and_then(Weak::upgrade) {
            return notify;
        }
        locks.retain(|_, n| n.strong_count() > 0);
        let notify = Arc::new(Notify::new());
        locks.insert(segment.to_owned(), Arc::downgrade(&notify));
        notify
    }

    /// Wakes the waiters of `segment`, or every waiter.
    fn wake(&self, segment: Option<&str>) {
        let locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        let woken = locks
            .iter()
            .filter(|(s, _)| segment.is_none_or(|segment| segment == s.as_str()))
            .filter_map(|(_, n)| n.upgrade());
        for notify in woken {
            notify.notify_waiters();
        }
    }

    /// Ends the listening (the locker shut down).
    pub fn stop(&self) {
        if let Some(task) = self.task.lock().unwrap_or_else(|e| e.into_inner()).take() {
            task.abort();
        }
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Opens a connection, LISTENs on `channel`, and returns its client (the connection lives while
/// it does) and the task that drives it (and dispatches its notifications) until it is lost.
async fn listen(config: &Config, channel: &str, hub: Weak<Hub>) -> Result<(Client, JoinHandle<()>)> {
    let pg = config.client();
    let connecting = pg.connect(NoTls);
    let (client, mut connection) = tokio::time::timeout(config.connect_timeout, connecting)
        .await
        .map_err(|_| crate::error::timeout("connecting", config.connect_timeout))?
        .map_err(|e| pg_error("connecting", e))?;
    let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
    let driver = tokio::spawn(async move {
        while let Some(message) = messages.next().await {
            match message {
                Ok(AsyncMessage::Notification(n)) => match hub.upgrade() {
                    Some(hub) => hub.wake(Some(n.payload())),
                    None => return,
                },
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(error = %e, "postgres: the LISTEN connection ended");
                    return;
                }
            }
        }
    });
    let listened = tokio::time::timeout(
        config.request_timeout,
        client.batch_execute(&format!("LISTEN \"{channel}\"")),
    )
    .await;
    match listened {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            driver.abort();
            return Err(pg_error("listening", e));
        }
        Err(_) => {
            driver.abort();
            return Err(crate::error::timeout("listening", config.request_timeout));
        }
    }
    Ok((client, driver))
}
