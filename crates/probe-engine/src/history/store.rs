//! The database: SQLite (a file under `--state-dir`) or PostgreSQL (shared by a cluster's
//! members), through sqlx's `Any` driver so that one set of queries serves both. The queries
//! stick to what both speak (`$n` parameters, `ON CONFLICT`); the schema is per backend
//! (`migrations/`), since SQLite keeps rollups `WITHOUT ROWID` and PostgreSQL has no such thing.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Once;
use std::time::Duration;

use parking_lot::Mutex;
use probe::target::TargetId;
use serde::Serialize;
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::migrate::Migrator;
use sqlx::{AnyConnection, AnyPool, Connection, Executor, Row};

use super::codec;
use super::rollup::{DAY_MS, DayRow};
use super::uptime::Change;
use probe::verdict::HealthState;

static SQLITE: Migrator = sqlx::migrate!("migrations/sqlite");
static POSTGRES: Migrator = sqlx::migrate!("migrations/postgres");

/// Where the history is kept.
#[derive(Clone, PartialEq, Eq)]
pub enum Backend {
    /// A SQLite file.
    Sqlite(PathBuf),
    /// A PostgreSQL database, by URL (which may hold a password: never shown).
    Postgres(String),
}

impl Backend {
    /// What status and logs may show: the file, or the URL without its password.
    pub fn describe(&self) -> String {
        match self {
            Self::Sqlite(path) => path.display().to_string(),
            Self::Postgres(url) => redact(url),
        }
    }

    /// `sqlite` or `postgres`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Sqlite(_) => "sqlite",
            Self::Postgres(_) => "postgres",
        }
    }
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.kind(), self.describe())
    }
}

/// A URL with any password replaced.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{}{user}:***{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_owned(),
    }
}

/// Why the database failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The driver's error.
    #[error("{0}")]
    Sql(#[from] sqlx::Error),
    /// The schema could not be brought up to date.
    #[error("migrating: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// The file could not be moved aside.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// One recorded transition.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TransitionRow {
    /// The target or group.
    pub target: String,
    /// Unix milliseconds.
    pub at_ms: i64,
    /// The state left.
    pub from: String,
    /// The state entered.
    pub to: String,
    /// Why (the engine's cause, or for a group what decided it).
    pub cause: String,
    /// The closed failure reason behind it, when there is one.
    pub reason: Option<String>,
    /// The detail: the failure, the degradation or the maintenance's reason.
    pub detail: Option<String>,
}

/// One operator action.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ActionRow {
    /// The target acted on.
    pub target: String,
    /// Unix milliseconds.
    pub at_ms: i64,
    /// What was done: `maintenance_set`, `maintenance_ended`, `circuit_<command>`,
    /// `ejection_cleared`.
    pub action: String,
    /// Who: the token's name, or the peer's address.
    pub who: String,
    /// What they said (the maintenance's reason and length).
    pub detail: Option<String>,
}

/// What one write carries: at most one transaction a second.
#[derive(Debug, Default)]
pub struct Batch {
    /// New transitions.
    pub transitions: Vec<TransitionRow>,
    /// Days of rollups, written over what was there.
    pub days: Vec<DayRow>,
    /// New operator actions.
    pub actions: Vec<ActionRow>,
}

impl Batch {
    /// Rows it holds.
    pub fn len(&self) -> usize {
        self.transitions.len() + self.days.len() + self.actions.len()
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What the size cap and retention dropped in one pass.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dropped {
    /// Rows past their retention.
    pub expired: u64,
    /// Rows dropped, oldest first, to stay under the size cap.
    pub capped: u64,
}

/// An open database.
pub struct Store {
    pool: AnyPool,
    backend: Backend,
    /// This daemon's session row: its `seen_ms` moves with every write.
    session: i64,
    /// Target ids by name, as numbered in `targets`.
    ids: Mutex<HashMap<String, i64>>,
}

/// What opening found, besides the store.
pub struct Opened {
    /// The store.
    pub store: Store,
    /// Where an unusable file was moved, and why it was unusable.
    pub moved_aside: Option<(PathBuf, String)>,
}

/// Rows per statement of a multi-row insert: well under both backends' parameter limits.
const ROWS_PER_STATEMENT: usize = 500;

impl Store {
    /// Opens (creating it when new) and migrates the database, and starts this daemon's
    /// session as `member`. A SQLite file that is not a sound database is moved aside (with
    /// its journal) and a new one started in its place.
    ///
    /// # Errors
    /// [`StoreError`] when no database could be opened at all.
    pub async fn open(backend: Backend, member: &str, now_ms: i64) -> Result<Opened, StoreError> {
        static DRIVERS: Once = Once::new();
        DRIVERS.call_once(sqlx::any::install_default_drivers);
        let (pool, moved_aside) = match &backend {
            Backend::Sqlite(path) => match Self::sqlite(path).await {
                Ok(pool) => (pool, None),
                Err(e) => {
                    let aside = move_aside(path, now_ms)?;
                    (Self::sqlite(path).await?, Some((aside, e.to_string())))
                }
            },
            Backend::Postgres(url) => {
                let pool = AnyPoolOptions::new()
                    .max_connections(4)
                    .acquire_timeout(Duration::from_secs(10))
                    .connect(url)
                    .await?;
                let mut conn = pool.acquire().await?;
                migrate(&POSTGRES, &mut conn).await?;
                drop(conn);
                (pool, None)
            }
        };
        let session = sqlx::query(
            "INSERT INTO sessions (member, started_ms, seen_ms) VALUES ($1, $2, $3) RETURNING id",
        )
        .bind(member)
        .bind(now_ms)
        .bind(now_ms)
        .fetch_one(&pool)
        .await?
        .try_get::<i64, _>(0)?;
        Ok(Opened {
            store: Self {
                pool,
                backend,
                session,
                ids: Mutex::default(),
            },
            moved_aside,
        })
    }

    /// Opens a SQLite file, checks that it is sound and migrates it.
    async fn sqlite(path: &Path) -> Result<AnyPool, StoreError> {
        let url = format!("sqlite://{}?mode=rwc", path.display());
        // One connection first, which fails at once on a file that is no database; a pool
        // would retry it until its timeout.
        let mut conn = AnyConnection::connect(&url).await?;
        let sound = Self::check(&mut conn).await;
        let _ = conn.close().await;
        sound?;
        let pool = AnyPoolOptions::new()
            .max_connections(4)
            .acquire_timeout(Duration::from_secs(10))
            .after_connect(|conn, _| {
                Box::pin(async move {
                    // WAL: readers (the API) never wait for the writer; NORMAL: a sync per
                    // checkpoint, not per transaction, and still never a corrupt file.
                    conn.execute("PRAGMA journal_mode = WAL").await?;
                    conn.execute("PRAGMA synchronous = NORMAL").await?;
                    conn.execute("PRAGMA foreign_keys = ON").await?;
                    Ok(())
                })
            })
            .connect(&url)
            .await?;
        Ok(pool)
    }

    /// Checks that a SQLite file is a sound database, and migrates it.
    async fn check(conn: &mut AnyConnection) -> Result<(), StoreError> {
        // Before the first table: only then can a file still choose its vacuum mode, which
        // lets the size cap give pages back to the file system.
        sqlx::query("PRAGMA auto_vacuum = INCREMENTAL")
            .execute(&mut *conn)
            .await?;
        let check: String = sqlx::query("PRAGMA quick_check")
            .fetch_one(&mut *conn)
            .await?
            .try_get(0)?;
        if check != "ok" {
            return Err(StoreError::Sql(sqlx::Error::Protocol(format!(
                "integrity check: {check}"
            ))));
        }
        sqlx::query("PRAGMA journal_mode = WAL")
            .execute(&mut *conn)
            .await?;
        migrate(&SQLITE, conn).await?;
        Ok(())
    }

    /// The backend.
    pub fn backend(&self) -> &Backend {
        &self.backend
    }

    /// Closes the pool.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// Writes a batch in one transaction and moves the session's `seen_ms` to `now_ms`.
    ///
    /// # Errors
    /// [`StoreError`]: nothing of the batch was written.
    pub async fn write(&self, batch: &Batch, now_ms: i64) -> Result<(), StoreError> {
        let names = batch
            .transitions
            .iter()
            .map(|t| t.target.as_str())
            .chain(batch.days.iter().map(|(_, t, _)| t.as_str()))
            .chain(batch.actions.iter().map(|a| a.target.as_str()));
        let mut tx = self.pool.begin().await?;
        // Numbered in the same transaction: a failed write leaves no half-numbered names.
        let (ids, fresh) = self.ids_of(&mut tx, names).await?;
        let id = |name: &str| ids.get(name).copied().unwrap_or_default();
        for chunk in batch.transitions.chunks(ROWS_PER_STATEMENT) {
            let sql = format!(
                "INSERT INTO transitions (target, at_ms, from_state, to_state, cause, reason, \
                 detail) VALUES {}",
                placeholders(chunk.len(), 7)
            );
            let mut q = sqlx::query(&sql);
            for t in chunk {
                q = q
                    .bind(id(&t.target))
                    .bind(t.at_ms)
                    .bind(t.from.as_str())
                    .bind(t.to.as_str())
                    .bind(t.cause.as_str())
                    .bind(t.reason.as_deref())
                    .bind(t.detail.as_deref());
            }
            q.execute(&mut *tx).await?;
        }
        for chunk in batch.days.chunks(ROWS_PER_STATEMENT) {
            let keyed: Vec<(i64, i64, &[u8])> = chunk
                .iter()
                .map(|(day, target, hours)| (*day, id(target.as_str()), hours.as_slice()))
                .collect();
            let merged = Self::merge_days(&mut tx, &keyed).await?;
            let sql = format!(
                "INSERT INTO rollups (day, target, hours) VALUES {} \
                 ON CONFLICT (day, target) DO UPDATE SET hours = excluded.hours",
                placeholders(chunk.len(), 3)
            );
            let mut q = sqlx::query(&sql);
            for ((day, target, _), hours) in keyed.iter().zip(&merged) {
                q = q.bind(*day).bind(*target).bind(hours.as_slice());
            }
            q.execute(&mut *tx).await?;
        }
        for chunk in batch.actions.chunks(ROWS_PER_STATEMENT) {
            let sql = format!(
                "INSERT INTO actions (target, at_ms, action, who, detail) VALUES {}",
                placeholders(chunk.len(), 5)
            );
            let mut q = sqlx::query(&sql);
            for a in chunk {
                q = q
                    .bind(id(&a.target))
                    .bind(a.at_ms)
                    .bind(a.action.as_str())
                    .bind(a.who.as_str())
                    .bind(a.detail.as_deref());
            }
            q.execute(&mut *tx).await?;
        }
        sqlx::query("UPDATE sessions SET seen_ms = $1 WHERE id = $2")
            .bind(now_ms)
            .bind(self.session)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        self.ids.lock().extend(fresh);
        Ok(())
    }

    /// The days to write, each with the hours its row already has and it lacks: a member
    /// that took a target over in the middle of a day (or a daemon that could not resume its
    /// day) writes over the row with what it counted, and the earlier hours stay.
    async fn merge_days(
        conn: &mut AnyConnection,
        days: &[(i64, i64, &[u8])],
    ) -> Result<Vec<Vec<u8>>, StoreError> {
        let sql = format!(
            "SELECT day, target, hours FROM rollups WHERE (day, target) IN (VALUES {})",
            placeholders(days.len(), 2)
        );
        let mut q = sqlx::query(&sql);
        for (day, target, _) in days {
            q = q.bind(*day).bind(*target);
        }
        let mut stored: HashMap<(i64, i64), Vec<u8>> = HashMap::new();
        for row in q.fetch_all(&mut *conn).await? {
            stored.insert((row.try_get(0)?, row.try_get(1)?), row.try_get(2)?);
        }
        Ok(days
            .iter()
            .map(|(day, target, hours)| {
                let old = stored
                    .get(&(*day, *target))
                    .and_then(|b| codec::decode(b).ok());
                match (old, codec::decode(hours)) {
                    (Some(old), Ok(mut new)) => {
                        if codec::fill(&mut new, &old) {
                            codec::encode(&new)
                        } else {
                            hours.to_vec()
                        }
                    }
                    _ => hours.to_vec(),
                }
            })
            .collect())
    }

    /// The ids of `names`, numbering the new ones in `conn`'s transaction: all of them, and
    /// those the cache did not have, to add to it once the transaction is committed.
    async fn ids_of<'a>(
        &self,
        conn: &mut AnyConnection,
        names: impl Iterator<Item = &'a str>,
    ) -> Result<(HashMap<String, i64>, Vec<(String, i64)>), StoreError> {
        let mut wanted: Vec<&str> = names.collect();
        wanted.sort_unstable();
        wanted.dedup();
        let mut found = HashMap::with_capacity(wanted.len());
        let mut missing = Vec::new();
        let mut new = Vec::new();
        {
            let known = self.ids.lock();
            for name in wanted {
                match known.get(name) {
                    Some(id) => {
                        found.insert(name.to_owned(), *id);
                    }
                    None => missing.push(name),
                }
            }
        }
        for chunk in missing.chunks(ROWS_PER_STATEMENT) {
            let sql = format!(
                "INSERT INTO targets (name) VALUES {} ON CONFLICT (name) DO NOTHING",
                placeholders(chunk.len(), 1)
            );
            let mut q = sqlx::query(&sql);
            for name in chunk {
                q = q.bind(*name);
            }
            q.execute(&mut *conn).await?;
            let sql = format!(
                "SELECT name, id FROM targets WHERE name IN ({})",
                numbered(1, chunk.len())
            );
            let mut q = sqlx::query(&sql);
            for name in chunk {
                q = q.bind(*name);
            }
            for row in q.fetch_all(&mut *conn).await? {
                let (name, id): (String, i64) = (row.try_get(0)?, row.try_get(1)?);
                new.push((name.clone(), id));
                found.insert(name, id);
            }
        }
        Ok((found, new))
    }

    /// Today's rollups of every target, for the counting to resume from.
    ///
    /// # Errors
    /// [`StoreError`].
    pub async fn today(&self, now_ms: i64) -> Result<Vec<(TargetId, i64, Vec<u8>)>, StoreError> {
        let day = now_ms.div_euclid(DAY_MS);
        let rows = sqlx::query(
            "SELECT t.name, r.hours FROM rollups r JOIN targets t ON t.id = r.target \
             WHERE r.day = $1",
        )
        .bind(day)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .filter_map(|row| {
                let name: String = row.try_get(0).ok()?;
                let hours: Vec<u8> = row.try_get(1).ok()?;
                Some((TargetId::new(&name).ok()?, day, hours))
            })
            .collect())
    }

    /// The transitions of `target` (of every target and group with `None`) in
    /// `[since_ms, until_ms)`, newest first, at most `limit`.
    ///
    /// # Errors
    /// [`StoreError`].
    pub async fn transitions(
        &self,
        target: Option<&str>,
        since_ms: i64,
        until_ms: i64,
        limit: i64,
    ) -> Result<Vec<TransitionRow>, StoreError> {
        // Two texts rather than `$n IS NULL OR ...`, which would keep SQLite off the index.
        let whose = if target.is_some() {
            "t.name = $4 AND"
        } else {
            ""
        };
        let sql = format!(
            "SELECT t.name, x.at_ms, x.from_state, x.to_state, x.cause, x.reason, x.detail \
             FROM transitions x JOIN targets t ON t.id = x.target \
             WHERE {whose} x.at_ms >= $1 AND x.at_ms < $2 ORDER BY x.at_ms DESC LIMIT $3"
        );
        let mut q = sqlx::query(&sql).bind(since_ms).bind(until_ms).bind(limit);
        if let Some(target) = target {
            q = q.bind(target);
        }
        let rows = q.fetch_all(&self.pool).await?;
        rows.iter().map(transition_row).collect()
    }

    /// A target's operator actions in `[since_ms, until_ms)`, newest first.
    ///
    /// # Errors
    /// [`StoreError`].
    pub async fn actions(
        &self,
        target: &str,
        since_ms: i64,
        until_ms: i64,
        limit: i64,
    ) -> Result<Vec<ActionRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT t.name, a.at_ms, a.action, a.who, a.detail \
             FROM actions a JOIN targets t ON t.id = a.target \
             WHERE t.name = $1 AND a.at_ms >= $2 AND a.at_ms < $3 \
             ORDER BY a.at_ms DESC LIMIT $4",
        )
        .bind(target)
        .bind(since_ms)
        .bind(until_ms)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(ActionRow {
                    target: row.try_get(0)?,
                    at_ms: row.try_get(1)?,
                    action: row.try_get(2)?,
                    who: row.try_get(3)?,
                    detail: row.try_get(4)?,
                })
            })
            .collect()
    }

    /// The days of rollups of `targets` in `[first_day, last_day]`: `(target, day, hours)`.
    ///
    /// # Errors
    /// [`StoreError`].
    pub async fn days(
        &self,
        targets: &[&str],
        first_day: i64,
        last_day: i64,
    ) -> Result<Vec<(String, i64, Vec<u8>)>, StoreError> {
        let mut out = Vec::new();
        if targets.is_empty() || last_day < first_day {
            return Ok(out);
        }
        // By key: one lookup per (day, target), so a target's 90 days never scan a fleet's.
        let days: Vec<i64> = (first_day..=last_day).collect();
        for names in targets.chunks(100) {
            let sql = format!(
                "SELECT t.name, r.day, r.hours FROM rollups r JOIN targets t ON t.id = r.target \
                 WHERE r.day IN ({}) AND t.name IN ({})",
                numbered(1, days.len()),
                numbered(days.len() + 1, names.len()),
            );
            let mut q = sqlx::query(&sql);
            for day in &days {
                q = q.bind(*day);
            }
            for name in names {
                q = q.bind(*name);
            }
            for row in q.fetch_all(&self.pool).await? {
                out.push((row.try_get(0)?, row.try_get(1)?, row.try_get(2)?));
            }
        }
        Ok(out)
    }

    /// What [`uptime::compute`](super::uptime::compute) needs for `targets` over
    /// `[from_ms, until_ms)`: each one's changes (from the last before `from_ms`) and every
    /// session that overlaps the window.
    ///
    /// # Errors
    /// [`StoreError`].
    pub async fn timeline(
        &self,
        targets: &[&str],
        from_ms: i64,
        until_ms: i64,
    ) -> Result<(HashMap<String, Vec<Change>>, Vec<(i64, i64)>), StoreError> {
        let mut changes: HashMap<String, Vec<Change>> = HashMap::new();
        for names in targets.chunks(100) {
            let list = numbered(3, names.len());
            let sql = format!(
                "SELECT t.name, x.at_ms, x.to_state, x.cause FROM transitions x \
                 JOIN targets t ON t.id = x.target \
                 WHERE t.name IN ({list}) AND x.at_ms < $2 AND x.at_ms >= COALESCE(( \
                     SELECT MAX(y.at_ms) FROM transitions y \
                     WHERE y.target = x.target AND y.at_ms <= $1), $1) \
                 ORDER BY t.name, x.at_ms"
            );
            let mut q = sqlx::query(&sql).bind(from_ms).bind(until_ms);
            for name in names {
                q = q.bind(*name);
            }
            for row in q.fetch_all(&self.pool).await? {
                let name: String = row.try_get(0)?;
                let to: String = row.try_get(2)?;
                let cause: String = row.try_get(3)?;
                let Some(to) = parse_state(&to) else { continue };
                changes.entry(name).or_default().push(Change {
                    at_ms: row.try_get(1)?,
                    to,
                    flapping: cause == "flapping",
                });
            }
        }
        let sessions = sqlx::query(
            "SELECT started_ms, seen_ms FROM sessions WHERE seen_ms > $1 AND started_ms < $2",
        )
        .bind(from_ms)
        .bind(until_ms)
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(|row| Ok((row.try_get(0)?, row.try_get(1)?)))
        .collect::<Result<Vec<(i64, i64)>, sqlx::Error>>()?;
        Ok((changes, sessions))
    }

    /// The bytes the history takes: SQLite's used pages (tables and indexes), PostgreSQL's live
    /// rows.
    ///
    /// # Errors
    /// [`StoreError`].
    pub async fn size(&self) -> Result<u64, StoreError> {
        let sql = match self.backend {
            Backend::Sqlite(_) => {
                "SELECT (p.page_count - f.freelist_count) * s.page_size \
                 FROM pragma_page_count() p, pragma_freelist_count() f, pragma_page_size() s"
            }
            // The live rows' bytes: PostgreSQL keeps a deleted row's space for new ones rather
            // than giving it back, so its files' sizes would never come under the cap.
            Backend::Postgres(_) => {
                "SELECT CAST( \
                 (SELECT COALESCE(SUM(pg_column_size(r.*)), 0) FROM rollups r) + \
                 (SELECT COALESCE(SUM(pg_column_size(x.*)), 0) FROM transitions x) + \
                 (SELECT COALESCE(SUM(pg_column_size(a.*)), 0) FROM actions a) + \
                 (SELECT COALESCE(SUM(pg_column_size(t.*)), 0) FROM targets t) AS BIGINT)"
            }
        };
        let bytes: i64 = sqlx::query(sql).fetch_one(&self.pool).await?.try_get(0)?;
        Ok(u64::try_from(bytes).unwrap_or(0))
    }

    /// Drops what is past its retention, then the oldest days while the history is over
    /// `max_bytes`.
    ///
    /// # Errors
    /// [`StoreError`].
    pub async fn prune(
        &self,
        now_ms: i64,
        transitions: Duration,
        rollups: Duration,
        max_bytes: u64,
    ) -> Result<Dropped, StoreError> {
        let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        let mut dropped = Dropped::default();
        let before = now_ms.saturating_sub(ms(transitions));
        let before_day = now_ms.saturating_sub(ms(rollups)).div_euclid(DAY_MS);
        dropped.expired += self.drop_before(before, before_day).await?;
        while self.size().await? > max_bytes {
            // The oldest day anything is kept for goes, whole.
            let oldest: Option<i64> = sqlx::query(
                "SELECT MIN(d) FROM (SELECT MIN(day) AS d FROM rollups \
                 UNION ALL SELECT MIN(at_ms) / 86400000 FROM transitions \
                 UNION ALL SELECT MIN(at_ms) / 86400000 FROM actions) AS o",
            )
            .fetch_one(&self.pool)
            .await?
            .try_get(0)?;
            let Some(oldest) = oldest else { break };
            let gone = self.drop_before((oldest + 1) * DAY_MS, oldest + 1).await?;
            dropped.capped += gone;
            self.vacuum().await?;
            if gone == 0 {
                break;
            }
        }
        if dropped.expired > 0 {
            self.vacuum().await?;
        }
        Ok(dropped)
    }

    /// Deletes transitions and actions before `before_ms` and rollups of days before
    /// `before_day`; the rows deleted.
    async fn drop_before(&self, before_ms: i64, before_day: i64) -> Result<u64, StoreError> {
        let mut tx = self.pool.begin().await?;
        let mut gone = 0;
        for (sql, bound) in [
            ("DELETE FROM transitions WHERE at_ms < $1", before_ms),
            ("DELETE FROM actions WHERE at_ms < $1", before_ms),
            ("DELETE FROM rollups WHERE day < $1", before_day),
        ] {
            gone += sqlx::query(sql)
                .bind(bound)
                .execute(&mut *tx)
                .await?
                .rows_affected();
        }
        sqlx::query("DELETE FROM sessions WHERE seen_ms < $1 AND id <> $2")
            .bind(before_ms)
            .bind(self.session)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(gone)
    }

    /// Gives freed pages back to the file system (SQLite; PostgreSQL's autovacuum does it).
    async fn vacuum(&self) -> Result<(), StoreError> {
        if matches!(self.backend, Backend::Sqlite(_)) {
            sqlx::query("PRAGMA incremental_vacuum")
                .execute(&self.pool)
                .await?;
        }
        Ok(())
    }
}

/// Runs `migrator` on `conn`. Straight on the connection: through `Acquire`, the migrator's
/// future is generic over lifetimes in a way that keeps the compiler from proving a spawned
/// task that awaits it `Send`.
async fn migrate(
    migrator: &Migrator,
    conn: &mut AnyConnection,
) -> Result<(), sqlx::migrate::MigrateError> {
    migrator.run_direct(conn).await
}

fn transition_row(row: &AnyRow) -> Result<TransitionRow, StoreError> {
    Ok(TransitionRow {
        target: row.try_get(0)?,
        at_ms: row.try_get(1)?,
        from: row.try_get(2)?,
        to: row.try_get(3)?,
        cause: row.try_get(4)?,
        reason: row.try_get(5)?,
        detail: row.try_get(6)?,
    })
}

/// A state by its API name.
pub fn parse_state(name: &str) -> Option<HealthState> {
    super::codec::STATES
        .into_iter()
        .find(|s| s.as_str() == name)
}

/// `($1,$2,..),($k,..)`: `rows` tuples of `cols` numbered parameters.
fn placeholders(rows: usize, cols: usize) -> String {
    let mut out = String::with_capacity(rows * cols * 5);
    for r in 0..rows {
        if r > 0 {
            out.push(',');
        }
        out.push('(');
        out.push_str(&numbered(r * cols + 1, cols));
        out.push(')');
    }
    out
}

/// `$first,..`: `n` numbered parameters.
fn numbered(first: usize, n: usize) -> String {
    (first..first + n)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Moves an unusable SQLite file and its journal aside: `<file>.corrupt-<unix ms>`.
fn move_aside(path: &Path, now_ms: i64) -> std::io::Result<PathBuf> {
    let aside = PathBuf::from(format!("{}.corrupt-{now_ms}", path.display()));
    std::fs::rename(path, &aside)?;
    for suffix in ["-wal", "-shm", "-journal"] {
        let journal = PathBuf::from(format!("{}{suffix}", path.display()));
        if journal.exists() {
            std::fs::rename(&journal, format!("{}{suffix}", aside.display()))?;
        }
    }
    Ok(aside)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_shows_without_its_password() {
        assert_eq!(
            redact("postgres://pe:s3cret@db:5432/history"),
            "postgres://pe:***@db:5432/history"
        );
        assert_eq!(redact("postgres://db/history"), "postgres://db/history");
    }

    #[test]
    fn placeholders_are_numbered_across_rows() {
        assert_eq!(placeholders(2, 3), "($1,$2,$3),($4,$5,$6)");
    }
}
