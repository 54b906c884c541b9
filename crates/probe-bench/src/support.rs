//! What the harnesses share: the one writer of the `RESULT` lines, flag value parsers, exit
//! codes, CPU and memory accounting from `/proc`, loopback listeners, child processes,
//! blackbox_exporter, and a collector of an engine's state changes.

use std::collections::{HashMap, HashSet};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use anyhow::Context;
use probe::Engine;
use probe::TargetId;
use probe::engine::Event;
use probe::health::HealthState;
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Exit status for a harness run: errors print as `error: ...` and exit 1, without a panic.
pub fn exit(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// Runs a harness's `future` to its end on a multi-threaded runtime of its own: for the
/// harnesses that drive real daemons and need no tuning of the runtime.
pub fn block_on<T>(
    future: impl std::future::Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    use anyhow::Context as _;
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?
        .block_on(future)
}

/// `utime + stime` (fields 14 and 15) of a `/proc/.../stat` line, in clock ticks.
pub fn stat_ticks(stat: &str) -> anyhow::Result<u64> {
    // The command name (field 2) is parenthesised and may contain spaces: split after it.
    let (_, rest) = stat.rsplit_once(')').context("malformed /proc stat line")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| -> anyhow::Result<u64> {
        // `rest` starts at field 3.
        let raw = fields.get(n - 3).context("short /proc stat line")?;
        raw.parse()
            .with_context(|| format!("field {n} of /proc stat: {raw:?}"))
    };
    Ok(field(14)? + field(15)?)
}

/// CPU ticks used so far by process `pid` (`"self"` for this one).
pub fn cpu_ticks(pid: &str) -> anyhow::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    stat_ticks(&stat)
}

/// This process's resident set size in bytes (`VmRSS` of `/proc/self/status`).
pub fn vm_rss() -> anyhow::Result<u64> {
    vm_rss_of("self")
}

/// Busy CPU ticks of the whole machine so far, all CPUs together: every field of the `cpu` line
/// of `/proc/stat` except `idle` and `iowait` (`guest` time is already inside `user`, so the
/// two guest fields are left out too).
pub fn box_ticks() -> anyhow::Result<u64> {
    let stat = std::fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
    let line = stat
        .lines()
        .find(|l| l.starts_with("cpu "))
        .context("no cpu line in /proc/stat")?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().context("a /proc/stat cpu field"))
        .collect::<anyhow::Result<_>>()?;
    // user nice system idle iowait irq softirq steal guest guest_nice
    Ok(fields
        .iter()
        .enumerate()
        .filter(|(i, _)| !matches!(i, 3 | 4 | 8 | 9))
        .map(|(_, v)| v)
        .sum())
}

/// `VmRSS` of process `pid` in bytes.
pub fn vm_rss_of(pid: &str) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .with_context(|| format!("no VmRSS in /proc/{pid}/status"))?;
    Ok(kib * 1024)
}

/// `USER_HZ`: the unit of `utime`/`stime` in `/proc/*/stat` and of `/proc/stat`, 100 on every
/// Linux ABI.
pub const TICKS_PER_SEC: f64 = 100.0;

/// Prints one figure in the result protocol that `scripts/bench` counts and `probe-bench report`
/// collects: `RESULT scenario=<name> metric=<name> value=<number> unit=<unit>`.
///
/// The only writer of these lines, so that the format the two readers parse lives in one place.
/// Values have six decimals; a figure without any sample (a percentile of nothing, a ratio over
/// zero) is not finite and prints as `value=nan`, which the report leaves out.
pub fn result(scenario: &str, metric: &str, value: f64, unit: &str) {
    if value.is_finite() {
        println!("RESULT scenario={scenario} metric={metric} value={value:.6} unit={unit}");
    } else {
        println!("RESULT scenario={scenario} metric={metric} value=nan unit={unit}");
    }
}

/// A flag's number of seconds, fractions allowed (`0.5`), as a duration: a clap value parser,
/// so that a negative, non-numeric or too large value is refused naming its flag.
pub fn secs(value: &str) -> Result<std::time::Duration, String> {
    let secs: f64 = value.parse().map_err(|e| format!("{e}"))?;
    std::time::Duration::try_from_secs_f64(secs).map_err(|e| format!("{e}"))
}

/// A flag's whole number of milliseconds, as a duration: a clap value parser.
pub fn millis(value: &str) -> Result<std::time::Duration, String> {
    let ms: u64 = value.parse().map_err(|e| format!("{e}"))?;
    Ok(std::time::Duration::from_millis(ms))
}

/// The fleet flags of the harnesses that run a daemon over loopback listeners (`api-load`,
/// `alerts-load`, `history-load`): TCP targets, their interval and the listeners they are
/// spread over. Declared once, flattened into each harness's flags, so that the three keep the
/// same names, defaults and parsing; a harness whose targets mean more (some going DOWN, some
/// toggled) rewords their help with `mut_arg`.
#[derive(clap::Args)]
pub struct FleetArgs {
    /// TCP connect targets of the daemon.
    #[arg(long, default_value_t = 10_000)]
    pub targets: usize,
    /// Each target's interval, in ms.
    #[arg(long = "interval-ms", value_name = "MS", default_value = "1000", value_parser = millis)]
    pub interval: std::time::Duration,
    /// Loopback listeners the targets are spread over, on 127.0.0.2 and up (1 to 250).
    #[arg(long, default_value_t = 16)]
    pub listeners: usize,
}

/// `path` if it names a file, else the first `PATH` entry holding it, then `/usr/sbin` (where
/// Debian puts haproxy, outside a user's `PATH`): the peers are found as a shell would, or not
/// at all.
pub fn which(path: &str) -> Option<std::path::PathBuf> {
    let direct = std::path::PathBuf::from(path);
    if path.contains('/') {
        return direct.is_file().then_some(direct);
    }
    let path_dirs = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    path_dirs
        .into_iter()
        .chain([std::path::PathBuf::from("/usr/sbin")])
        .map(|dir| dir.join(path))
        .find(|candidate| candidate.is_file())
}

/// Nearest-rank percentile `q` of sorted values (NaN when empty): with 20 samples p99 is the
/// maximum, which is what a small sample honestly says.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// An accept-and-drop listener on `ip` (any free port, backlog 4096) served by its own OS thread
/// named `thread`: a probe target whose accepting costs this process as little as it can.
pub fn accept_and_drop(ip: [u8; 4], thread: String) -> anyhow::Result<std::net::SocketAddr> {
    accept_and_count(ip, thread, None)
}

/// As [`accept_and_drop`], counting every accepted connection in `accepted` when given: one
/// probe that reached the listener each, a count that costs the listener an atomic increment
/// where reading the prober's own metrics may cost it a render of every target's series.
pub fn accept_and_count(
    ip: [u8; 4],
    thread: String,
    accepted: Option<std::sync::Arc<std::sync::atomic::AtomicU64>>,
) -> anyhow::Result<std::net::SocketAddr> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))
        .context("creating a listener socket")?;
    socket.set_reuse_address(true)?;
    socket
        .bind(&std::net::SocketAddr::from((ip, 0)).into())
        .with_context(|| format!("binding {ip:?}:0"))?;
    socket.listen(4096).context("listen")?;
    let listener: std::net::TcpListener = socket.into();
    let addr = listener.local_addr()?;
    std::thread::Builder::new()
        .name(thread)
        .spawn(move || {
            // Accept and drop: a plain close (FIN) that races with the prober's reset.
            for conn in listener.incoming() {
                if let (Ok(_), Some(accepted)) = (&conn, &accepted) {
                    accepted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                drop(conn);
            }
        })
        .context("spawning a listener thread")?;
    Ok(addr)
}

/// The sum of every sample of the series `name`, whatever their labels, in a Prometheus text
/// exposition; 0 without any. A series whose name only starts with `name` is not counted.
pub fn series_sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        // From +0: an empty f64 sum is -0, which prints as `-0`.
        .fold(0.0, |sum, v| sum + v)
}

/// Counts histogram records: one `probe_fleet_duration_seconds` record per probe run.
#[derive(Default)]
pub struct RunCounter(pub std::sync::atomic::AtomicU64);

impl metrics::HistogramFn for RunCounter {
    fn record(&self, _value: f64) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// (probe runs, failed runs) of `engine`'s targets so far: the sums of their
/// `probe_duration_seconds_count` and `probe_failures_total` series.
pub fn engine_counts(engine: &probe::Engine) -> (u64, u64) {
    let mut text = String::new();
    engine.encode_metrics(&mut text);
    let sum = |name: &str| -> u64 {
        text.lines()
            .filter(|l| l.starts_with(name) && l[name.len()..].starts_with('{'))
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok())
            .sum()
    };
    (
        sum("probe_duration_seconds_count"),
        sum("probe_failures_total"),
    )
}

/// The daemon binary a harness starts: `given`, or `probe-engine` next to this binary (that
/// is, `target/release/probe-engine`); an error naming the build command when it is missing.
pub fn daemon_binary(given: Option<&std::path::Path>) -> anyhow::Result<std::path::PathBuf> {
    use anyhow::Context as _;
    let daemon = match given {
        Some(path) => path.to_owned(),
        None => std::env::current_exe()?
            .parent()
            .context("locating target/release")?
            .join("probe-engine"),
    };
    if !daemon.is_file() {
        anyhow::bail!(
            "no daemon binary at {} (cargo build --release -p probe-engine --bin probe-engine)",
            daemon.display()
        );
    }
    Ok(daemon)
}

/// A child process that is killed (by its own pid) when dropped.
pub struct ChildGuard(pub std::process::Child);

impl ChildGuard {
    pub fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts this binary again with `args` as a server process of its own (so that its CPU is not
/// the prober's), and reads the loopback port it prints as its first line.
pub fn start_child_server(
    args: &[&std::ffi::OsStr],
    what: &str,
) -> anyhow::Result<(ChildGuard, std::net::SocketAddr)> {
    use std::io::BufRead as _;
    let mut child = std::process::Command::new(std::env::current_exe()?)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .with_context(|| format!("starting the {what} process"))?;
    let stdout = child
        .stdout
        .take()
        .with_context(|| format!("{what} stdout"))?;
    let guard = ChildGuard(child);
    let mut line = String::new();
    std::io::BufReader::new(stdout)
        .read_line(&mut line)
        .with_context(|| format!("reading the {what}'s port"))?;
    let port: u16 = line
        .trim()
        .parse()
        .with_context(|| format!("the {what}'s port"))?;
    Ok((guard, std::net::SocketAddr::from(([127, 0, 0, 1], port))))
}

/// A blackbox_exporter started by a harness on a free loopback port with one module, stopped when
/// dropped: the suite's fixture, probing through one module.
pub struct Blackbox {
    exporter: probe_testkit::Blackbox,
    module: String,
}

impl Blackbox {
    /// Starts `binary` with module `module` of prober `prober` (`tcp` or `http`), IPv4 only.
    pub fn start(
        binary: &std::path::Path,
        module: &str,
        prober: &str,
        timeout: std::time::Duration,
    ) -> anyhow::Result<Self> {
        Self::start_with(
            binary,
            module,
            &format!(
                "modules:\n  {module}:\n    prober: {prober}\n    timeout: {}ms\n    {prober}:\n      \
                 preferred_ip_protocol: ip4\n      ip_protocol_fallback: false\n",
                timeout.as_millis()
            ),
        )
    }

    /// Starts `binary` with `config` as its `blackbox.yml`, probing through its module `module`.
    pub fn start_with(
        binary: &std::path::Path,
        module: &str,
        config_yaml: &str,
    ) -> anyhow::Result<Self> {
        Ok(Self {
            exporter: probe_testkit::Blackbox::start_binary(binary, config_yaml)?,
            module: module.to_owned(),
        })
    }

    /// Its process, whose CPU the harness measures.
    pub fn pid(&self) -> u32 {
        self.exporter.pid()
    }

    /// Its loopback port.
    pub fn port(&self) -> u16 {
        self.exporter.addr().port()
    }

    /// The first line of its `--version`.
    pub fn version(&self) -> &str {
        &self.exporter.version
    }

    /// A check of `target` through the exporter's `/probe` endpoint, passing on `probe_success 1`.
    pub fn spec(&self, target: &str) -> anyhow::Result<probe::tier::http::HttpSpec> {
        let url = format!(
            "http://127.0.0.1:{}/probe?target={target}&module={}",
            self.port(),
            self.module
        );
        let mut spec = probe::tier::http::HttpSpec::get(url.parse()?);
        spec.expect.body_contains = Some("probe_success 1".into());
        Ok(spec)
    }

    /// Waits (15 s at most) until the exporter answers `spec` successfully.
    pub async fn wait_ready(
        &self,
        spec: probe::tier::http::HttpSpec,
        timeout: std::time::Duration,
    ) -> anyhow::Result<()> {
        use probe::outcome::Verdict;
        use probe::tier::Probe;
        let ready = probe::tier::http::HttpProbe::new(spec, probe::tier::resolve::Names::system());
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(15);
        loop {
            match ready.check(timeout).await.verdict {
                Verdict::Failed(f) if tokio::time::Instant::now() >= deadline => {
                    anyhow::bail!("blackbox_exporter did not come up: {f}")
                }
                Verdict::Failed(_) => {
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
                _ => return Ok(()),
            }
        }
    }
}

/// Every state change of one engine, as received from [`Engine::subscribe`].
pub struct Collector {
    events: Arc<Mutex<Vec<Event>>>,
    lagged: Arc<AtomicU64>,
    /// How many events were collected so far: waiters wake on its changes instead of polling.
    count: watch::Receiver<usize>,
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl Collector {
    pub fn start(engine: &Engine) -> Self {
        let mut rx = engine.subscribe();
        let events = Arc::new(Mutex::new(Vec::new()));
        let lagged = Arc::new(AtomicU64::new(0));
        let (count_tx, count) = watch::channel(0);
        let stop = CancellationToken::new();
        let task = tokio::spawn({
            let (events, lagged, stop) = (events.clone(), lagged.clone(), stop.clone());
            async move {
                let record = |received| match received {
                    Ok(event) => {
                        let mut events = lock(&events);
                        events.push(event);
                        count_tx.send_replace(events.len());
                        true
                    }
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        lagged.fetch_add(n, Ordering::Relaxed);
                        true
                    }
                    Err(broadcast::error::RecvError::Closed) => false,
                };
                loop {
                    let received = tokio::select! {
                        biased;
                        r = rx.recv() => r,
                        () = stop.cancelled() => break,
                    };
                    if !record(received) {
                        return;
                    }
                }
                // Stopped: the engine has stopped too and sends nothing more, so whatever is
                // still queued is everything that is left.
                loop {
                    let received = match rx.try_recv() {
                        Ok(event) => Ok(event),
                        Err(broadcast::error::TryRecvError::Lagged(n)) => {
                            Err(broadcast::error::RecvError::Lagged(n))
                        }
                        Err(_) => return,
                    };
                    record(received);
                }
            }
        });
        Self {
            events,
            lagged,
            count,
            stop,
            task: Some(task),
        }
    }

    /// Stops collecting once every event already sent has been received; call it after
    /// [`Engine::stopped`], so that nothing more can be sent.
    pub async fn stop(&mut self) -> anyhow::Result<()> {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            task.await.context("the event collector panicked")?;
        }
        Ok(())
    }

    /// A receiver of the event count, to wait for new events with [`Self::next_change`].
    pub fn changes(&self) -> watch::Receiver<usize> {
        self.count.clone()
    }

    /// Waits for more events or until `deadline`; false at the deadline (or if collecting ended).
    pub async fn next_change(
        changes: &mut watch::Receiver<usize>,
        deadline: tokio::time::Instant,
    ) -> bool {
        tokio::select! {
            changed = changes.changed() => changed.is_ok(),
            () = tokio::time::sleep_until(deadline) => false,
        }
    }

    /// How many distinct targets have entered `state` at least once.
    pub fn targets_reaching(&self, state: HealthState) -> usize {
        lock(&self.events)
            .iter()
            .filter(|e| e.to == state)
            .map(|e| &e.target)
            .collect::<HashSet<_>>()
            .len()
    }

    pub fn lagged(&self) -> u64 {
        self.lagged.load(Ordering::Relaxed)
    }

    pub fn count(&self, f: impl Fn(&Event) -> bool) -> usize {
        lock(&self.events).iter().filter(|e| f(e)).count()
    }

    pub fn matching(&self, f: impl Fn(&Event) -> bool) -> Vec<Event> {
        lock(&self.events)
            .iter()
            .filter(|e| f(e))
            .cloned()
            .collect()
    }

    /// Each target's first DOWN at or after `since`.
    pub fn first_down_after(&self, since: SystemTime) -> HashMap<TargetId, SystemTime> {
        let mut downs = HashMap::new();
        for e in lock(&self.events).iter() {
            if e.to == HealthState::Down && e.at >= since {
                downs.entry(e.target.clone()).or_insert(e.at);
            }
        }
        downs
    }

    /// How long, in seconds, each DOWN entered within `[from, to)` lasted (until the target's
    /// next UP or DEGRADED), for those that ended.
    pub fn outages(&self, from: SystemTime, to: SystemTime) -> Vec<f64> {
        let events = lock(&self.events);
        let mut open: HashMap<&TargetId, SystemTime> = HashMap::new();
        let mut outages = Vec::new();
        for e in events.iter() {
            if e.to == HealthState::Down && e.at >= from && e.at < to {
                open.insert(&e.target, e.at);
            } else if e.to.is_healthy()
                && let Some(began) = open.remove(&e.target)
            {
                outages.push(e.at.duration_since(began).unwrap_or_default().as_secs_f64());
            }
        }
        outages
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// Locks `m`, also after a panic of another holder (a harness reports what it has).
pub fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Probes counted by a harness's checking loops, passed and failed.
#[derive(Default)]
pub struct Counts {
    pub ok: std::sync::atomic::AtomicU64,
    pub failed: std::sync::atomic::AtomicU64,
}

impl Counts {
    /// Probes run, and of them failed.
    pub fn read(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering;
        let failed = self.failed.load(Ordering::Relaxed);
        (self.ok.load(Ordering::Relaxed) + failed, failed)
    }
}

/// Log lines of a harness's daemon kept, for its errors.
pub const LOG_TAIL: usize = 20;

/// How often [`Daemon::wait_ready`] asks `/readyz`: readiness has no push channel.
const READY_POLL: std::time::Duration = std::time::Duration::from_millis(250);

/// A daemon binary started by a harness, not yet listening.
pub struct Starting {
    name: String,
    child: ChildGuard,
    listening: tokio::sync::oneshot::Receiver<std::net::SocketAddr>,
    tail: Arc<Mutex<std::collections::VecDeque<String>>>,
}

/// A daemon a harness runs, killed when dropped.
pub struct Daemon {
    /// What the harness calls it (a member's name, say), in its errors.
    pub name: String,
    pub child: ChildGuard,
    /// Its pid, as `/proc` paths want it.
    pub pid: String,
    /// Where its API listens.
    pub api: std::net::SocketAddr,
    tail: Arc<Mutex<std::collections::VecDeque<String>>>,
}

impl Starting {
    /// Starts `binary run --config CONFIG --listen 127.0.0.1:0 --log-format json` with `args`,
    /// logging at `rust_log` (harnesses leave out the library's per-transition lines: thousands
    /// of them would cost the daemon what it would not spend otherwise). A log reader thread
    /// keeps its last lines, and with `echo` prints its warnings and errors as they come.
    pub fn spawn(
        binary: &std::path::Path,
        config: &std::path::Path,
        args: &[&std::ffi::OsStr],
        rust_log: &str,
        name: &str,
        echo: bool,
    ) -> anyhow::Result<Self> {
        let mut child = std::process::Command::new(binary)
            .arg("run")
            .arg("--config")
            .arg(config)
            .args(["--listen", "127.0.0.1:0", "--log-format", "json"])
            .args(args)
            // The harness's runs keep state only where they ask (`--state-dir`), never in a
            // `data` directory of whoever ran them.
            .args(
                (!args.iter().any(|a| *a == "--state-dir"))
                    .then_some(["--state-dir", "none"])
                    .into_iter()
                    .flatten(),
            )
            .env("RUST_LOG", rust_log)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        let stderr = child.stderr.take().context("the daemon's stderr")?;
        let child = ChildGuard(child);
        let (tx, listening) = tokio::sync::oneshot::channel();
        let tail = Arc::new(Mutex::new(std::collections::VecDeque::with_capacity(
            LOG_TAIL,
        )));
        let kept = tail.clone();
        let label = name.to_owned();
        std::thread::Builder::new()
            .name(format!("log-{name}"))
            .spawn(move || read_log(stderr, tx, &kept, echo.then_some(label.as_str())))
            .context("spawning a log reader")?;
        Ok(Self {
            name: name.to_owned(),
            child,
            listening,
            tail,
        })
    }

    /// Waits (at most `patience`) for the daemon's `listening` line.
    pub async fn listening(self, patience: std::time::Duration) -> anyhow::Result<Daemon> {
        let addr = match tokio::time::timeout(patience, self.listening).await {
            Ok(Ok(addr)) => addr,
            Ok(Err(_)) => anyhow::bail!(
                "{} exited before it listened; its log:\n{}",
                self.name,
                tail_of(&self.tail)
            ),
            Err(_) => anyhow::bail!(
                "{} did not listen within {patience:?}; its log:\n{}",
                self.name,
                tail_of(&self.tail)
            ),
        };
        Ok(Daemon {
            pid: self.child.pid().to_string(),
            name: self.name,
            child: self.child,
            api: addr,
            tail: self.tail,
        })
    }
}

impl Daemon {
    /// The last lines it logged.
    pub fn log_tail(&self) -> String {
        tail_of(&self.tail)
    }

    /// Fails, with the end of its log, when the daemon has exited.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.child.0.try_wait()? {
            anyhow::bail!(
                "{} exited ({status}); its log:\n{}",
                self.name,
                tail_of(&self.tail)
            );
        }
        Ok(())
    }

    /// Waits until `/readyz` answers 200 (without a readiness policy: until every target is
    /// UP), failing with the end of its log when the daemon exits first or is not ready by
    /// `deadline`.
    pub async fn wait_ready(
        &mut self,
        http: &reqwest::Client,
        deadline: tokio::time::Instant,
    ) -> anyhow::Result<()> {
        loop {
            self.check_alive()?;
            let ready = http
                .get(format!("http://{}/readyz", self.api))
                .send()
                .await
                .is_ok_and(|r| r.status() == reqwest::StatusCode::OK);
            if ready {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                anyhow::bail!(
                    "{} was not ready in time; its log:\n{}",
                    self.name,
                    self.log_tail()
                );
            }
            tokio::time::sleep(READY_POLL).await;
        }
    }
}

/// Reads a daemon's log lines until it exits: sends the address of its `listening` line, keeps
/// the last lines, and prints its warnings and errors under `echo` when given.
fn read_log(
    stderr: std::process::ChildStderr,
    tx: tokio::sync::oneshot::Sender<std::net::SocketAddr>,
    tail: &Mutex<std::collections::VecDeque<String>>,
    echo: Option<&str>,
) {
    use std::io::BufRead as _;
    let mut tx = Some(tx);
    for line in std::io::BufReader::new(stderr)
        .lines()
        .map_while(Result::ok)
    {
        let value: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
        if tx.is_some()
            && let Some(addr) = listening_addr(&value)
            && let Some(tx) = tx.take()
        {
            let _ = tx.send(addr);
        }
        if let Some(name) = echo
            && matches!(value["level"].as_str(), Some("WARN" | "ERROR"))
        {
            eprintln!("{name}: {line}");
        }
        let mut tail = lock(tail);
        if tail.len() == LOG_TAIL {
            tail.pop_front();
        }
        tail.push_back(line);
    }
}

/// The address of a JSON `listening` log line.
fn listening_addr(line: &serde_json::Value) -> Option<std::net::SocketAddr> {
    if line["message"] != "listening" {
        return None;
    }
    line["addr"].as_str()?.parse().ok()
}

fn tail_of(tail: &Mutex<std::collections::VecDeque<String>>) -> String {
    lock(tail).iter().cloned().collect::<Vec<_>>().join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listening_line_gives_the_address() {
        let line: serde_json::Value = serde_json::from_str(
            r#"{"timestamp":"x","level":"INFO","message":"listening","addr":"127.0.0.1:4242"}"#,
        )
        .unwrap();
        assert_eq!(listening_addr(&line), "127.0.0.1:4242".parse().ok());
        let stopped = serde_json::json!({"message": "stopped"});
        assert_eq!(listening_addr(&stopped), None);
        assert_eq!(listening_addr(&serde_json::Value::Null), None);
    }

    #[test]
    fn series_are_summed_over_their_labels_only() {
        let text = "# TYPE probe_fleet_duration_seconds histogram\n\
                    probe_fleet_duration_seconds_bucket{kind=\"tcp\",le=\"0.1\"} 7\n\
                    probe_fleet_duration_seconds_count{kind=\"tcp\"} 10\n\
                    probe_fleet_duration_seconds_count{kind=\"http\"} 5\n\
                    probe_fleet_duration_seconds_count_other 100\n\
                    probe_cluster_state_writes_total 3\n";
        assert_eq!(series_sum(text, "probe_fleet_duration_seconds_count"), 15.0);
        assert_eq!(series_sum(text, "probe_cluster_state_writes_total"), 3.0);
        assert_eq!(series_sum(text, "probe_state_transitions_total"), 0.0);
        let text = "# TYPE alertmanager_alerts gauge\n\
                    alertmanager_alerts{state=\"active\"} 7\n\
                    alertmanager_alerts{state=\"suppressed\"} 2\n\
                    alertmanager_alerts_received_total{status=\"firing\",version=\"v2\"} 10\n\
                    alertmanager_alerts_invalid_total{version=\"v2\"} 1\n";
        assert_eq!(series_sum(text, "alertmanager_alerts"), 9.0);
        assert_eq!(series_sum(text, "alertmanager_alerts_received_total"), 10.0);
    }
}
