use super::{queue::JOIN_AT, runtime::block_on, *};

/// A test kind: inserts its values into `t`, failing the whole group (after inserting the rest)
/// when one is negative, as a constraint one work breaks would.
struct Insert(i64);

impl WriteKind for Insert {
    type Answer = i64;
    type Key = i64;

    fn conflict_keys(&self) -> Vec<i64> {
        vec![self.0.abs()]
    }

    async fn write_all(conn: &mut Conn<'_>, group: &[&Self]) -> StoreResult<Vec<i64>> {
        for work in group {
            super::super::execute!(&mut *conn, "INSERT INTO t (v) VALUES ($1)", work.0.abs())?;
        }
        if group.iter().any(|w| w.0 < 0) {
            return Err(StoreError::Statement("a negative value".to_owned()));
        }
        Ok(group.iter().map(|w| w.0 * 10).collect())
    }
}

lanes! {
    struct TestLanes { insert: Insert }
}

type Answer<R> = oneshot::Receiver<StoreResult<R>>;

/// A closure that inserts `value` and then fails if `fail` is set (its insert must not survive).
fn closure(value: i64, fail: bool) -> (Box<dyn Pending<TestLanes>>, Answer<i64>) {
    let (reply, answer) = oneshot::channel();
    let op: Operation<i64> = Box::new(move |conn| {
        Box::pin(async move {
            super::super::execute!(conn, "INSERT INTO t (v) VALUES ($1)", value)?;
            if fail {
                return Err(StoreError::WriterGone);
            }
            Ok(value)
        })
    });
    (Box::new(Closure { op: Some(op), answer: None, reply }), answer)
}

fn typed(value: i64) -> (Box<dyn Pending<TestLanes>>, Answer<i64>) {
    let (reply, answer) = oneshot::channel();
    (Box::new(Typed { work: Insert(value), reply }), answer)
}

fn table() -> rusqlite::Connection {
    let conn = rusqlite::Connection::open_in_memory().unwrap();
    conn.execute_batch("CREATE TABLE t (v INTEGER PRIMARY KEY)").unwrap();
    conn
}

fn run_all(
    conn: &mut rusqlite::Connection,
    jobs: Vec<(Box<dyn Pending<TestLanes>>, Answer<i64>)>,
) -> Vec<Option<i64>> {
    let (jobs, answers): (Vec<_>, Vec<_>) = jobs.into_iter().unzip();
    block_on(run_batch(&mut Conn::Local(conn), "BEGIN IMMEDIATE", jobs, None));
    answers.into_iter().map(|a| block_on(a).ok().and_then(Result::ok)).collect()
}

fn run(conn: &mut rusqlite::Connection, spec: &[(i64, bool)]) -> Vec<bool> {
    let jobs = spec.iter().map(|&(v, f)| closure(v, f)).collect();
    run_all(conn, jobs).into_iter().map(|a| a.is_some()).collect()
}

fn stored(conn: &rusqlite::Connection) -> Vec<i64> {
    let mut statement = conn.prepare("SELECT v FROM t ORDER BY v").unwrap();
    statement.query_map([], |row| row.get(0)).unwrap().map(Result::unwrap).collect()
}

#[test]
fn a_failing_operation_leaves_nothing_and_takes_nothing_with_it() {
    let mut conn = table();
    // The first fails (no savepoint: the transaction restarts), so does the new first after
    // it; then one in a savepoint fails between two that succeed.
    let answers = run(&mut conn, &[(1, true), (2, true), (3, false), (4, true), (5, false)]);
    assert_eq!(answers, [false, false, true, false, true]);
    assert_eq!(stored(&conn), [3, 5]);
    // A batch of one that fails, then one that succeeds: the connection is usable after both.
    assert_eq!(run(&mut conn, &[(6, true)]), [false]);
    assert_eq!(run(&mut conn, &[(7, false), (8, false)]), [true, true]);
    assert_eq!(stored(&conn), [3, 5, 7, 8]);
    // A database error in the first operation (a duplicate key) is handled the same way.
    assert_eq!(run(&mut conn, &[(3, false), (9, false)]), [false, true]);
    assert_eq!(stored(&conn), [3, 5, 7, 8, 9]);
}

/// What runs before the commit is told how many works the transaction wrote (the fan-out of
/// webhook events leaves a saturated writer's to its task): the works that ran, a group's each.
#[test]
fn before_commit_is_told_how_many_works_the_transaction_wrote() {
    use std::sync::{Arc, Mutex};
    let mut conn = table();
    let told = Arc::new(Mutex::new(Vec::new()));
    let noted = told.clone();
    let before_commit: Box<BeforeCommit> = Box::new(move |_, works| noted.lock().unwrap().push(works));
    let (jobs, answers): (Vec<_>, Vec<_>) =
        vec![typed(1), typed(2), closure(10, false), typed(3)].into_iter().unzip();
    block_on(run_batch(&mut Conn::Local(&mut conn), "BEGIN IMMEDIATE", jobs, Some(&*before_commit)));
    assert!(answers.into_iter().all(|a| block_on(a).is_ok_and(|a| a.is_ok())));
    assert_eq!(*told.lock().unwrap(), [4]);
}

#[test]
fn an_operation_whose_caller_has_gone_is_not_run() {
    let mut conn = table();
    let (first, gone_first) = closure(1, false);
    let (second, kept) = closure(2, false);
    let (third, gone_third) = typed(3);
    drop((gone_first, gone_third));
    block_on(run_batch(&mut Conn::Local(&mut conn), "BEGIN IMMEDIATE", vec![first, second, third], None));
    assert!(block_on(kept).unwrap().is_ok());
    assert_eq!(stored(&conn), [2], "only the operation someone waits for ran");
}

/// Typed works of one kind form one group and get their own answers; a work that repeats a
/// conflict key runs alone after the group (and here fails on the key the group wrote); a group
/// that fails as a whole is undone and its works run again one by one, so only the bad one fails.
#[test]
fn typed_works_are_grouped_and_a_failing_group_runs_again_one_by_one() {
    let mut conn = table();
    let before = batch_counts().2;
    let answers = run_all(&mut conn, vec![typed(1), typed(2), closure(10, false), typed(3)]);
    assert_eq!(answers, [Some(10), Some(20), Some(10), Some(30)]);
    assert!(batch_counts().2 >= before + 3, "the three typed works were written as one group");
    assert_eq!(run_all(&mut conn, vec![typed(4), typed(5), typed(4)]), [Some(40), Some(50), None]);
    assert_eq!(stored(&conn), [1, 2, 3, 4, 5, 10]);
    assert_eq!(run_all(&mut conn, vec![typed(6), typed(-7), typed(8)]), [Some(60), None, Some(80)]);
    assert_eq!(stored(&conn), [1, 2, 3, 4, 5, 6, 8, 10], "the bad work's insert was undone");
}

fn file_writer(dir: &std::path::Path) -> WriterHandle<TestLanes> {
    let path = dir.join("w.db");
    let conn = crate::store::local::open(&path, false).unwrap();
    conn.execute_batch("CREATE TABLE t (v INTEGER PRIMARY KEY)").unwrap();
    runtime::spawn_sqlite(
        conn,
        crate::store::local::open(&path, false).unwrap(),
        Box::new(|_, _| {}),
        Box::new(|| {}),
    )
    .unwrap()
}

async fn insert(writer: &WriterHandle<TestLanes>, value: i64) -> StoreResult<i64> {
    writer.submit(Insert(value)).await
}

async fn panic_in_a_batch(writer: &WriterHandle<TestLanes>) -> StoreResult<()> {
    writer
        .write(|conn| {
            Box::pin(async move {
                super::super::execute!(conn, "INSERT INTO t (v) VALUES (1000)")?;
                panic!("injected into the writer");
            })
        })
        .await
}

/// A panic in a batch is caught: its caller is answered `WriterGone`, its transaction undone,
/// and the writer goes on; after [`runtime::CRASH_LOOP`] panics within a minute it gives up:
/// the handle reports the failure and every later write is refused at once.
#[tokio::test]
async fn a_writer_survives_a_panic_and_gives_up_after_a_crash_loop() {
    let dir = tempfile::tempdir().unwrap();
    let writer = file_writer(dir.path());
    assert_eq!(insert(&writer, 1).await.unwrap(), 10);
    assert!(matches!(panic_in_a_batch(&writer).await, Err(StoreError::WriterGone)));
    assert_eq!(insert(&writer, 2).await.unwrap(), 20, "the writer went on after the panic");
    assert!(futures_util::FutureExt::now_or_never(writer.failed()).is_none(), "the writer has not failed");
    for _ in 1..runtime::CRASH_LOOP {
        assert!(panic_in_a_batch(&writer).await.is_err());
    }
    let reason = tokio::time::timeout(std::time::Duration::from_secs(5), writer.failed()).await.unwrap();
    assert!(reason.contains("panicked"), "{reason}");
    assert!(matches!(insert(&writer, 3).await, Err(StoreError::WriterGone)));
    // Closing a failed writer does not wait for anything.
    tokio::time::timeout(std::time::Duration::from_secs(5), writer.close()).await.unwrap();
    let conn = rusqlite::Connection::open(dir.path().join("w.db")).unwrap();
    assert_eq!(stored(&conn), [1, 2], "no panicking batch left a row");
}

/// With no other writer writing, a writer takes what is queued at once; while another writes
/// its batch, it gathers writes until it holds [`JOIN_AT`] (then writes beside it) or the other
/// has finished.
#[tokio::test]
async fn a_second_writer_gathers_a_batch_while_the_first_writes() {
    let (handle, queue) = WriterHandle::<TestLanes>::new(2);
    let mut answers = Vec::new();
    for v in 0..3 {
        let (job, answer) = typed(v);
        handle.send(job).await.unwrap();
        answers.push(answer);
    }
    let (first, writing) = next_batch(&queue).await.unwrap();
    assert_eq!(first.len(), 3, "none writing: what is queued, at once");
    for v in 3..6 {
        let (job, answer) = typed(v);
        handle.send(job).await.unwrap();
        answers.push(answer);
    }
    let second = tokio::spawn({
        let queue = queue.clone();
        async move { next_batch(&queue).await.map(|(batch, _writing)| batch.len()) }
    });
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    assert!(!second.is_finished(), "the first still writes: the second gathers more");
    drop(writing);
    assert_eq!(second.await.unwrap(), Some(3), "the first has finished: the second writes what it holds");

    let (job, answer) = typed(50);
    handle.send(job).await.unwrap();
    answers.push(answer);
    let (_, writing) = next_batch(&queue).await.unwrap();
    for v in 0..JOIN_AT as i64 {
        let (job, answer) = typed(100 + v);
        handle.send(job).await.unwrap();
        answers.push(answer);
    }
    let joined = tokio::time::timeout(std::time::Duration::from_secs(5), next_batch(&queue)).await;
    let (batch, _joined) = joined.expect("a deep queue: it writes beside the first").unwrap();
    assert_eq!(batch.len(), JOIN_AT);
    drop(writing);
}
