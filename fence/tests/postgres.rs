//! The PostgreSQL fence against the real server of `scripts/backends` (`LOCKSMITH_TEST_POSTGRES`).

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use locksmith_fence::postgres::Fence;
use locksmith_fence::FenceError;
use tokio_postgres::{Client, NoTls};

async fn client() -> Client {
    let url = std::env::var("LOCKSMITH_TEST_POSTGRES")
        .expect("LOCKSMITH_TEST_POSTGRES is not set: run `eval \"$(scripts/backends up)\"` first");
    let (client, connection) = tokio_postgres::connect(&url, NoTls).await.expect("connect");
    tokio::spawn(connection);
    client
}

/// A fence table and a data table of this test alone.
async fn tables(client: &Client, what: &str) -> (Fence, String) {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::SeqCst);
    let suffix = format!("{what}_{}_{n}", std::process::id());
    let fence = Fence::new(&format!("fences_{suffix}")).expect("a table name");
    fence.create_table(client).await.expect("create the fence table");
    let data = format!("data_{suffix}");
    client
        .batch_execute(&format!(
            "CREATE TABLE {data} (id int PRIMARY KEY, v text); INSERT INTO {data} VALUES (1, 'none')"
        ))
        .await
        .expect("create the data table");
    (fence, data)
}

async fn value(client: &Client, data: &str) -> String {
    client
        .query_one(&format!("SELECT v FROM {data} WHERE id = 1"), &[])
        .await
        .expect("read")
        .get(0)
}

/// One holder's write: admitted, then the update, in one transaction.
async fn write(client: &mut Client, fence: &Fence, data: &str, token: u64) -> Result<(), FenceError> {
    let txn = client.transaction().await.expect("begin");
    fence.admit(&txn, "billing", token).await?;
    txn.execute(&format!("UPDATE {data} SET v = $1 WHERE id = 1"), &[&token.to_string()])
        .await
        .expect("update");
    txn.commit().await.expect("commit");
    Ok(())
}

/// Equal and higher tokens are admitted; a lower one is refused with both tokens, its
/// transaction writes nothing; locks are independent of each other.
#[tokio::test]
async fn lower_tokens_are_refused() {
    let mut client = client().await;
    let (fence, data) = tables(&client, "refused").await;
    assert_eq!(fence.highest(&client, "billing").await.expect("highest"), None);
    write(&mut client, &fence, &data, 5).await.expect("token 5");
    write(&mut client, &fence, &data, 5).await.expect("token 5 again");
    let stale = write(&mut client, &fence, &data, 4).await;
    assert!(
        matches!(stale, Err(FenceError::Stale { token: 4, highest: 5 })),
        "{stale:?}"
    );
    assert_eq!(value(&client, &data).await, "5");
    write(&mut client, &fence, &data, 8).await.expect("token 8");
    assert_eq!(value(&client, &data).await, "8");
    assert_eq!(fence.highest(&client, "billing").await.expect("highest"), Some(8));

    let txn = client.transaction().await.expect("begin");
    fence
        .admit(&txn, "billing/other", 1)
        .await
        .expect("another lock, its own tokens");
    txn.commit().await.expect("commit");
}

/// A later holder's admit waits until the earlier holder's transaction has committed, and the
/// earlier holder, coming back after that, is refused: the writes land in token order.
#[tokio::test]
async fn a_later_holder_waits_for_the_earlier_transaction() {
    let mut earlier = client().await;
    let (fence, data) = tables(&earlier, "waits").await;
    let committing = Arc::new(AtomicBool::new(false));

    let txn = earlier.transaction().await.expect("begin");
    fence.admit(&txn, "billing", 5).await.expect("token 5");

    let later = {
        let (fence, data, committing) = (fence.clone(), data.clone(), committing.clone());
        tokio::spawn(async move {
            let mut client = client().await;
            let txn = client.transaction().await.expect("begin");
            fence.admit(&txn, "billing", 6).await.expect("token 6");
            assert!(
                committing.load(Ordering::SeqCst),
                "token 6 was admitted while token 5's transaction was open"
            );
            txn.execute(&format!("UPDATE {data} SET v = '6' WHERE id = 1"), &[])
                .await
                .expect("update");
            txn.commit().await.expect("commit");
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    txn.execute(&format!("UPDATE {data} SET v = '5' WHERE id = 1"), &[])
        .await
        .expect("update");
    committing.store(true, Ordering::SeqCst);
    txn.commit().await.expect("commit");
    later.await.expect("the later holder");
    assert_eq!(value(&earlier, &data).await, "6");

    let stale = write(&mut earlier, &fence, &data, 5).await;
    assert!(
        matches!(stale, Err(FenceError::Stale { token: 5, highest: 6 })),
        "{stale:?}"
    );
    assert_eq!(value(&earlier, &data).await, "6");
}

/// Table names that are not plain identifiers, empty lock names and tokens beyond bigint are
/// refused before any SQL; a missing table is a store error.
#[tokio::test]
async fn bad_input_is_refused() {
    for table in [
        "",
        "Fences",
        "a.b.c",
        "f; DROP TABLE x",
        "1fences",
        "fence\"s",
        &"f".repeat(64),
    ] {
        assert!(
            matches!(Fence::new(table), Err(FenceError::Invalid(_))),
            "{table:?} was accepted"
        );
    }
    let client = client().await;
    let (fence, _) = tables(&client, "bad").await;
    let empty = fence.admit(&client, "", 1).await;
    assert!(matches!(empty, Err(FenceError::Invalid(_))), "{empty:?}");
    let huge = fence.admit(&client, "billing", u64::MAX).await;
    assert!(matches!(huge, Err(FenceError::Invalid(_))), "{huge:?}");
    let missing = Fence::new("public.no_such_fences").expect("a name");
    let result = missing.admit(&client, "billing", 1).await;
    assert!(matches!(result, Err(FenceError::Store(_))), "{result:?}");
}

/// A fence table made by hand in another shape (`CREATE TABLE IF NOT EXISTS` keeps it): `highest`
/// answers an error, never a panic (`Row::get` panicked on a type it could not convert, or NULL)
/// and never a token of 0 for a negative one.
#[tokio::test]
async fn a_table_of_another_shape_is_an_error() {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let client = client().await;
    for column in ["integer", "bigint"] {
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let table = format!("fences_shape_{}_{n}", std::process::id());
        client
            .batch_execute(&format!(
                "CREATE TABLE {table} (lock text PRIMARY KEY, token {column}); \
                 INSERT INTO {table} VALUES ('seven', 7), ('null', NULL), ('negative', -5)"
            ))
            .await
            .expect("create the table by hand");
        let fence = Fence::new(&table).expect("a table name");
        fence.create_table(&client).await.expect("IF NOT EXISTS keeps it");
        for lock in ["null", "negative"] {
            let highest = fence.highest(&client, lock).await;
            assert!(highest.is_err(), "{column} {lock}: {highest:?}");
        }
        let seven = fence.highest(&client, "seven").await;
        match column {
            "bigint" => assert_eq!(seven.expect("a bigint token"), Some(7)),
            _ => assert!(matches!(seven, Err(FenceError::Store(_))), "{seven:?}"),
        }
    }
}
