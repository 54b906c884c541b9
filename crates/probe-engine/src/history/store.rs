//! The database: SQLite (a file under `--state-dir`) or PostgreSQL (shared by a cluster's
//! members), through sqlx's `Any` driver so that one set of queries serves both. The queries
//! stick to what both speak (`$n` parameters, `ON CONFLICT`); the schema is per backend
//! (`migrations/`), since SQLite keeps rollups `WITHOUT ROWID` and PostgreSQL has no such thing.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Once;
use std::time::Duration;

use parking_lot::Mutex;
use probe::TargetId;
use serde::Serialize;
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::migrate::Migrator;
use sqlx::{AnyConnection, AnyPool, Connection, Executor, Row};

use super::rollup::{DAY_MS, DayRow};
use super::uptime::Change;
use super::{codec, events};
use probe::health::HealthState;

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
    targets: Mutex<HashMap<String, Numbered>>,
    /// Text ids, as numbered in `texts`.
    texts: Mutex<HashMap<String, Numbered>>,
}

/// A string's id in `targets` or `texts`, and the last day the row is known to say it is
/// used (`texts.last_day`; a target's never expires).
#[derive(Clone, Copy, Debug)]
struct Numbered {
    id: i64,
    through_day: i64,
}

/// The tables that number strings once, so that the big ones repeat a small integer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Numbering {
    /// Target and group names.
    Targets,
    /// Causes, reasons and details of transitions.
    Texts,
}

/// What opening found, besides the store.
pub struct Opened {
    /// The store.
    pub store: Store,
    /// Where an unusable file was moved, and why it was unusable.
    pub moved_aside: Option<(PathBuf, String)>,
}

/// Rows per statement of a multi-row insert: well under both backends' parameter limits, and
/// small, since binding is quadratic in a statement's parameters with SQLite (the driver looks
/// each `$n` up by name, through a list of them all): 100 rows cost a fifth of 500 per row
/// bound (the 10k day rows of a snapshot took 0.4% of the daemon's CPU at 500 rows),
/// for a handful more statements.
const ROWS_PER_STATEMENT: usize = 100;

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
        let store = Self {
            pool,
            backend,
            session,
            targets: Mutex::default(),
            texts: Mutex::default(),
        };
        store.convert_rows().await?;
        Ok(Opened { store, moved_aside })
    }

    /// Moves the transitions an older daemon kept as rows (`transitions_v1`) into packed
    /// days, once, and drops their table.
    async fn convert_rows(&self) -> Result<(), StoreError> {
        match self.convert_rows_once().await {
            // Another member of the cluster converted them first.
            Err(_) if !self.has_rows_table().await? => Ok(()),
            done => done,
        }
    }

    async fn has_rows_table(&self) -> Result<bool, StoreError> {
        let sql = match self.backend {
            Backend::Sqlite(_) => {
                "SELECT COUNT(*) FROM sqlite_master \
                 WHERE type = 'table' AND name = 'transitions_v1'"
            }
            Backend::Postgres(_) => {
                "SELECT COUNT(*) FROM information_schema.tables \
                 WHERE table_schema = current_schema() AND table_name = 'transitions_v1'"
            }
        };
        let n: i64 = sqlx::query(sql).fetch_one(&self.pool).await?.try_get(0)?;
        Ok(n > 0)
    }

    async fn convert_rows_once(&self) -> Result<(), StoreError> {
        if !self.has_rows_table().await? {
            return Ok(());
        }
        let mut tx = self.pool.begin().await?;
        if matches!(self.backend, Backend::Postgres(_)) {
            // Members starting together: the first converts, the others wait, then find the
            // table gone.
            sqlx::query("LOCK TABLE transitions_v1 IN EXCLUSIVE MODE")
                .execute(&mut *tx)
                .await?;
        }
        let rows = sqlx::query(
            "SELECT t.name, x.at_ms, x.from_state, x.to_state, x.cause, x.reason, x.detail \
             FROM transitions_v1 x JOIN targets t ON t.id = x.target ORDER BY x.at_ms",
        )
        .fetch_all(&mut *tx)
        .await?
        .iter()
        .map(transition_row)
        .collect::<Result<Vec<_>, _>>()?;
        let names = rows.iter().map(|t| (t.target.as_str(), 0)).collect();
        let (ids, fresh) = self.number(&mut tx, Numbering::Targets, names).await?;
        let id = |name: &str| ids.get(name).copied().unwrap_or_default();
        let fresh_texts = self.append_changes(&mut tx, &id, &rows).await?;
        sqlx::query("DROP TABLE transitions_v1")
            .execute(&mut *tx)
            .await?;
        self.commit(tx, fresh, fresh_texts).await
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

    /// Closes the pool. A SQLite file first takes its journal back
    /// (`wal_checkpoint(TRUNCATE)`), so that a stopped daemon leaves the history in one file,
    /// whole, for `sqlite3` and for copies; a checkpoint that fails (a reader holding the file)
    /// leaves the journal, which the next open replays.
    pub async fn close(&self) {
        if matches!(self.backend, Backend::Sqlite(_))
            && let Err(e) = sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
                .execute(&self.pool)
                .await
        {
            tracing::debug!(error = %e, "the history's journal stays beside it");
        }
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
            .chain(batch.actions.iter().map(|a| a.target.as_str()))
            .map(|name| (name, 0))
            .collect();
        let mut tx = self.pool.begin().await?;
        // Numbered in the same transaction: a failed write leaves no half-numbered names.
        let (ids, fresh) = self.number(&mut tx, Numbering::Targets, names).await?;
        let id = |name: &str| ids.get(name).copied().unwrap_or_default();
        let fresh_texts = self
            .append_changes(&mut tx, &id, &batch.transitions)
            .await?;
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
        self.commit(tx, fresh, fresh_texts).await
    }

    /// Commits `tx`, then remembers the targets and texts it numbered: a number is cached only
    /// once it is in the database.
    async fn commit(
        &self,
        tx: sqlx::Transaction<'_, sqlx::Any>,
        targets: Vec<(String, Numbered)>,
        texts: Vec<(String, Numbered)>,
    ) -> Result<(), StoreError> {
        tx.commit().await?;
        self.targets.lock().extend(targets);
        self.texts.lock().extend(texts);
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

    /// Appends `transitions` to their targets' days (`events`), numbering their texts: the
    /// texts numbered, to cache once the transaction is committed.
    async fn append_changes(
        &self,
        conn: &mut AnyConnection,
        id: &impl Fn(&str) -> i64,
        transitions: &[TransitionRow],
    ) -> Result<Vec<(String, Numbered)>, StoreError> {
        if transitions.is_empty() {
            return Ok(Vec::new());
        }
        let used = transitions
            .iter()
            .flat_map(|t| {
                let day = t.at_ms.div_euclid(DAY_MS);
                [
                    Some(t.cause.as_str()),
                    t.reason.as_deref(),
                    t.detail.as_deref(),
                ]
                .into_iter()
                .flatten()
                .map(move |text| (text, day))
            })
            .collect();
        let (texts, fresh) = self.number(conn, Numbering::Texts, used).await?;
        let text = |s: &str| texts.get(s).and_then(|id| u64::try_from(*id).ok());
        // By target and day, in the order written: one appended row each.
        let mut rows: BTreeMap<(i64, i64), Vec<u8>> = BTreeMap::new();
        for t in transitions {
            // Rows are made from states' names; one that is not is no transition to keep.
            let (Some(from), Some(to)) = (parse_state(&t.from), parse_state(&t.to)) else {
                continue;
            };
            let day = t.at_ms.div_euclid(DAY_MS);
            let packed = events::Packed {
                ms_of_day: u32::try_from(t.at_ms - day * DAY_MS).unwrap_or_default(),
                from,
                to,
                cause: text(&t.cause).unwrap_or_default(),
                reason: t.reason.as_deref().and_then(text),
                detail: t.detail.as_deref().and_then(text),
            };
            events::encode_into(rows.entry((id(&t.target), day)).or_default(), &packed);
        }
        let rows: Vec<_> = rows.into_iter().collect();
        // Appended in the database, without reading the row first: see `events`.
        let appended = match self.backend {
            Backend::Sqlite(_) => "CAST(changes.events || excluded.events AS BLOB)",
            Backend::Postgres(_) => "changes.events || excluded.events",
        };
        for chunk in rows.chunks(ROWS_PER_STATEMENT) {
            let sql = format!(
                "INSERT INTO changes (target, day, events) VALUES {} \
                 ON CONFLICT (target, day) DO UPDATE SET events = {appended}",
                placeholders(chunk.len(), 3)
            );
            let mut q = sqlx::query(&sql);
            for ((target, day), events) in chunk {
                q = q.bind(*target).bind(*day).bind(events.as_slice());
            }
            q.execute(&mut *conn).await?;
        }
        Ok(fresh)
    }

    /// The ids of `wanted` strings (each with the day it is used on) in `table`, numbering
    /// the new ones in `conn`'s transaction: all of them, and those the cache did not have
    /// (or had for an earlier day), to add to it once the transaction is committed.
    async fn number(
        &self,
        conn: &mut AnyConnection,
        table: Numbering,
        wanted: Vec<(&str, i64)>,
    ) -> Result<(HashMap<String, i64>, Vec<(String, Numbered)>), StoreError> {
        let mut days: HashMap<&str, i64> = HashMap::new();
        for (s, day) in wanted {
            let last = days.entry(s).or_insert(day);
            *last = (*last).max(day);
        }
        let mut found = HashMap::with_capacity(days.len());
        let mut missing = Vec::new();
        {
            let known = match table {
                Numbering::Targets => self.targets.lock(),
                Numbering::Texts => self.texts.lock(),
            };
            for (s, day) in days {
                match known.get(s) {
                    Some(n) if n.through_day >= day => {
                        found.insert(s.to_owned(), n.id);
                    }
                    _ => missing.push((s, day)),
                }
            }
        }
        missing.sort_unstable();
        let mut fresh = Vec::new();
        for chunk in missing.chunks(ROWS_PER_STATEMENT) {
            let sql = match table {
                Numbering::Targets => format!(
                    "INSERT INTO targets (name) VALUES {} ON CONFLICT (name) DO NOTHING",
                    placeholders(chunk.len(), 1)
                ),
                // The later day of the two: members' clocks and batches need not agree.
                Numbering::Texts => format!(
                    "INSERT INTO texts (text, last_day) VALUES {} ON CONFLICT (text) DO UPDATE \
                     SET last_day = CASE WHEN excluded.last_day > texts.last_day \
                     THEN excluded.last_day ELSE texts.last_day END",
                    placeholders(chunk.len(), 2)
                ),
            };
            let mut q = sqlx::query(&sql);
            for (s, day) in chunk {
                q = q.bind(*s);
                if table == Numbering::Texts {
                    q = q.bind(*day);
                }
            }
            q.execute(&mut *conn).await?;
            let sql = match table {
                Numbering::Targets => "SELECT name, id FROM targets WHERE name IN",
                Numbering::Texts => "SELECT text, id FROM texts WHERE text IN",
            };
            let sql = format!("{sql} ({})", numbered(1, chunk.len()));
            let mut q = sqlx::query(&sql);
            for (s, _) in chunk {
                q = q.bind(*s);
            }
            let through: HashMap<&str, i64> = chunk.iter().copied().collect();
            for row in q.fetch_all(&mut *conn).await? {
                let (s, id): (String, i64) = (row.try_get(0)?, row.try_get(1)?);
                let through_day = match table {
                    Numbering::Targets => i64::MAX,
                    Numbering::Texts => through.get(s.as_str()).copied().unwrap_or_default(),
                };
                fresh.push((s.clone(), Numbered { id, through_day }));
                found.insert(s, id);
            }
        }
        Ok((found, fresh))
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
        let limit = usize::try_from(limit).unwrap_or(0);
        // Two texts rather than `$n IS NULL OR ...`, which would keep SQLite off the index.
        let whose = if target.is_some() {
            "t.name = $3 AND"
        } else {
            ""
        };
        // Parameters bind in order: the days, then the name.
        let days = |sql, first: i64, last: i64| {
            let q = sqlx::query(sql).bind(first).bind(last);
            match target {
                Some(name) => q.bind(name),
                None => q,
            }
        };
        // The days there are, so that an open-ended span walks only those.
        let sql = format!(
            "SELECT MIN(c.day), MAX(c.day) FROM changes c JOIN targets t ON t.id = c.target \
             WHERE {whose} c.day >= $1 AND c.day <= $2"
        );
        let last_day = until_ms.saturating_sub(1).div_euclid(DAY_MS);
        let span = days(&sql, since_ms.div_euclid(DAY_MS), last_day)
            .fetch_one(&self.pool)
            .await?;
        let (Some(first), Some(mut top)): (Option<i64>, Option<i64>) =
            (span.try_get(0)?, span.try_get(1)?)
        else {
            return Ok(Vec::new());
        };
        // Newest days first, a day of the fleet's (a month of one target's) at a time, until
        // `limit` are found.
        let step = if target.is_some() { 30 } else { 1 };
        let sql = format!(
            "SELECT t.name, c.day, c.events FROM changes c JOIN targets t ON t.id = c.target \
             WHERE {whose} c.day >= $1 AND c.day <= $2"
        );
        let mut found: Vec<(String, i64, events::Packed)> = Vec::new();
        while top >= first && found.len() < limit {
            let bottom = (top - step + 1).max(first);
            let rows = days(&sql, bottom, top).fetch_all(&self.pool).await?;
            let mut window = Vec::new();
            for row in rows {
                let (name, day): (String, i64) = (row.try_get(0)?, row.try_get(1)?);
                for e in unpack(&row.try_get::<Vec<u8>, _>(2)?) {
                    let at = day * DAY_MS + i64::from(e.ms_of_day);
                    if (since_ms..until_ms).contains(&at) {
                        window.push((name.clone(), at, e));
                    }
                }
            }
            // Newest first; of one millisecond, the one written last.
            window.reverse();
            window.sort_by_key(|(_, at, _)| std::cmp::Reverse(*at));
            found.extend(window);
            top = bottom - 1;
        }
        found.truncate(limit);
        let ids: Vec<u64> = found
            .iter()
            .flat_map(|(_, _, e)| [Some(e.cause), e.reason, e.detail])
            .flatten()
            .collect();
        let texts = self.texts_of(ids).await?;
        let text = |id: Option<u64>| id.and_then(|id| texts.get(&id).cloned());
        Ok(found
            .into_iter()
            .map(|(target, at_ms, e)| TransitionRow {
                target,
                at_ms,
                from: e.from.as_str().to_owned(),
                to: e.to.as_str().to_owned(),
                // A text another member's shorter retention dropped reads as none.
                cause: text(Some(e.cause)).unwrap_or_default(),
                reason: text(e.reason),
                detail: text(e.detail),
            })
            .collect())
    }

    /// The texts of `ids`, by id.
    async fn texts_of(&self, ids: Vec<u64>) -> Result<HashMap<u64, String>, StoreError> {
        let mut ids: Vec<i64> = ids
            .into_iter()
            .filter_map(|id| i64::try_from(id).ok())
            .collect();
        ids.sort_unstable();
        ids.dedup();
        let mut out = HashMap::with_capacity(ids.len());
        for chunk in ids.chunks(ROWS_PER_STATEMENT) {
            let sql = format!(
                "SELECT id, text FROM texts WHERE id IN ({})",
                numbered(1, chunk.len())
            );
            let mut q = sqlx::query(&sql);
            for id in chunk {
                q = q.bind(*id);
            }
            for row in q.fetch_all(&self.pool).await? {
                let id: i64 = row.try_get(0)?;
                out.insert(u64::try_from(id).unwrap_or_default(), row.try_get(1)?);
            }
        }
        Ok(out)
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
        let mut packed: HashMap<String, Vec<(i64, events::Packed)>> = HashMap::new();
        let (first_day, last_day) = (
            from_ms.div_euclid(DAY_MS),
            until_ms.saturating_sub(1).div_euclid(DAY_MS),
        );
        for names in targets.chunks(100) {
            let list = numbered(3, names.len());
            // The window's days, and the last day before it with any: its last transition
            // says the state the window starts in.
            let sql = format!(
                "SELECT t.name, c.day, c.events FROM changes c \
                 JOIN targets t ON t.id = c.target \
                 WHERE t.name IN ({list}) AND c.day <= $2 AND c.day >= COALESCE(( \
                     SELECT MAX(d.day) FROM changes d \
                     WHERE d.target = c.target AND d.day < $1), $1)"
            );
            let mut q = sqlx::query(&sql).bind(first_day).bind(last_day);
            for name in names {
                q = q.bind(*name);
            }
            for row in q.fetch_all(&self.pool).await? {
                let (name, day): (String, i64) = (row.try_get(0)?, row.try_get(1)?);
                let mine = packed.entry(name).or_default();
                for e in unpack(&row.try_get::<Vec<u8>, _>(2)?) {
                    mine.push((day * DAY_MS + i64::from(e.ms_of_day), e));
                }
            }
        }
        let flapping = self.text_id("flapping").await?;
        let mut changes: HashMap<String, Vec<Change>> = HashMap::with_capacity(packed.len());
        for (name, mut events) in packed {
            events.sort_by_key(|(at, _)| *at);
            // From the last at or before the window's start.
            let start = events
                .iter()
                .rposition(|(at, _)| *at <= from_ms)
                .unwrap_or(0);
            let kept: Vec<Change> = events[start..]
                .iter()
                .take_while(|(at, _)| *at < until_ms)
                .map(|(at, e)| Change {
                    at_ms: *at,
                    to: e.to,
                    flapping: Some(e.cause) == flapping,
                })
                .collect();
            if !kept.is_empty() {
                changes.insert(name, kept);
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

    /// The id of a text, when it has one.
    async fn text_id(&self, text: &str) -> Result<Option<u64>, StoreError> {
        let row = sqlx::query("SELECT id FROM texts WHERE text = $1")
            .bind(text)
            .fetch_optional(&self.pool)
            .await?;
        Ok(match row {
            Some(row) => u64::try_from(row.try_get::<i64, _>(0)?).ok(),
            None => None,
        })
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
                 (SELECT COALESCE(SUM(pg_column_size(c.*)), 0) FROM changes c) + \
                 (SELECT COALESCE(SUM(pg_column_size(x.*)), 0) FROM texts x) + \
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
                 UNION ALL SELECT MIN(day) FROM changes \
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
            // A day's transitions go with the day: kept up to a day longer than asked.
            (
                "DELETE FROM changes WHERE day < $1",
                before_ms.div_euclid(DAY_MS),
            ),
            ("DELETE FROM actions WHERE at_ms < $1", before_ms),
            ("DELETE FROM rollups WHERE day < $1", before_day),
        ] {
            gone += sqlx::query(sql)
                .bind(bound)
                .execute(&mut *tx)
                .await?
                .rows_affected();
        }
        // Texts no transition kept names any more (not counted: they are part of those).
        sqlx::query("DELETE FROM texts WHERE last_day < $1")
            .bind(before_ms.div_euclid(DAY_MS))
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM sessions WHERE seen_ms < $1 AND id <> $2")
            .bind(before_ms)
            .bind(self.session)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        let before_day = before_ms.div_euclid(DAY_MS);
        self.texts.lock().retain(|_, n| n.through_day >= before_day);
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

/// A row's transitions; a row that is not a day of them is skipped, not an error: the rest
/// of the history still reads.
fn unpack(bytes: &[u8]) -> Vec<events::Packed> {
    events::decode(bytes).unwrap_or_default()
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
    use std::borrow::Cow;

    use super::*;

    /// 2026-01-01T00:00:00Z.
    const T0: i64 = 1_767_225_600_000;

    /// A database as the first schema left it, transitions as rows: opening it packs them
    /// (texts and all), drops their table, and reads them back as before.
    async fn rows_are_packed_when_opened(backend: Backend, url: &str) {
        sqlx::any::install_default_drivers();
        let all = match backend {
            Backend::Sqlite(_) => &SQLITE,
            Backend::Postgres(_) => &POSTGRES,
        };
        let first = Migrator {
            migrations: Cow::Owned(all.migrations[..1].to_vec()),
            ignore_missing: false,
            locking: true,
            no_tx: false,
        };
        let mut conn = AnyConnection::connect(url).await.unwrap();
        migrate(&first, &mut conn).await.unwrap();
        conn.execute(
            "INSERT INTO targets (name) VALUES ('db'), ('web'); \
             INSERT INTO transitions (target, at_ms, from_state, to_state, cause, reason, detail) \
             VALUES (1, 1767225600000, 'PROBING', 'UP', 'results', NULL, NULL), \
                    (1, 1767229200000, 'UP', 'DOWN', 'results', 'timeout', 'no answer'), \
                    (2, 1767315600500, 'UP', 'DOWN', 'flapping', NULL, NULL)",
        )
        .await
        .unwrap();
        conn.close().await.unwrap();

        let store = Store::open(backend.clone(), "a", T0 + 2 * DAY_MS)
            .await
            .unwrap()
            .store;
        assert!(!store.has_rows_table().await.unwrap());
        let back = store
            .transitions(None, T0, T0 + 2 * DAY_MS, 10)
            .await
            .unwrap();
        let row =
            |target: &str, at_ms, from: &str, to: &str, cause: &str, why: Option<(&str, &str)>| {
                TransitionRow {
                    target: target.to_owned(),
                    at_ms,
                    from: from.to_owned(),
                    to: to.to_owned(),
                    cause: cause.to_owned(),
                    reason: why.map(|(r, _)| r.to_owned()),
                    detail: why.map(|(_, d)| d.to_owned()),
                }
            };
        assert_eq!(
            back,
            vec![
                row(
                    "web",
                    T0 + DAY_MS + 3_600_000 + 500,
                    "UP",
                    "DOWN",
                    "flapping",
                    None
                ),
                row(
                    "db",
                    T0 + 3_600_000,
                    "UP",
                    "DOWN",
                    "results",
                    Some(("timeout", "no answer"))
                ),
                row("db", T0, "PROBING", "UP", "results", None),
            ]
        );
        store.close().await;
        // Opened again: nothing to convert, nothing doubled.
        let store = Store::open(backend, "a", T0 + 2 * DAY_MS)
            .await
            .unwrap()
            .store;
        let again = store
            .transitions(None, T0, T0 + 2 * DAY_MS, 10)
            .await
            .unwrap();
        assert_eq!(again, back);
        store.close().await;
    }

    #[tokio::test]
    async fn sqlite_rows_are_packed_when_opened() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history.db");
        let url = format!("sqlite://{}?mode=rwc", path.display());
        rows_are_packed_when_opened(Backend::Sqlite(path.clone()), &url).await;
        // Closed, the file holds everything: its journal was taken back into it.
        let wal = path.with_file_name("history.db-wal");
        assert_eq!(std::fs::metadata(&wal).map_or(0, |m| m.len()), 0, "{wal:?}");
    }

    #[tokio::test]
    async fn postgres_rows_are_packed_when_opened() {
        let Some(pg) = probe_testkit::postgres_or_skip() else {
            return;
        };
        rows_are_packed_when_opened(Backend::Postgres(pg.url()), &pg.url()).await;
    }

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
