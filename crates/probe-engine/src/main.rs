//! `probe-engine`: run the probe daemon, check a config, or drive a running daemon (`ctl`).

mod ctl;

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use metrics_exporter_prometheus::PrometheusHandle;
use probe::engine::EngineConfig;
use probe::health::SelfHealthConfig;
use probe::scheduler::SchedulerConfig;
use probe_engine::daemon::{self, Daemon};
use probe_engine::{limits, watch};
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

/// Health probe engine: probes the targets declared in YAML and serves their health.
#[derive(Parser)]
#[command(name = "probe-engine", version, about)]
struct Cli {
    /// Log line format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, for log pipelines.
    Json,
}

// Parsed once at start and matched at once: the size of the larger variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Probe the configured targets and serve the health API.
    Run {
        /// A YAML file, or a directory whose *.yaml and *.yml files are merged.
        #[arg(long, short, default_value = "probes")]
        config: PathBuf,
        /// Address of the health API.
        #[arg(long, default_value = "127.0.0.1:9464")]
        listen: SocketAddr,
        /// Also serve grpc.health.v1 (Check, Watch; HTTP/2, under TLS when --web-config has
        /// it) here, for Kubernetes `grpc:` probes (plaintext only) and load balancers: service
        /// "" is /readyz, "liveness" is /livez, a target's or group's id its health. Off by
        /// default.
        #[arg(long, value_name = "ADDR")]
        grpc_listen: Option<SocketAddr>,
        /// The most probes running at once.
        #[arg(long, default_value = "4096")]
        max_in_flight: NonZeroUsize,
        /// Workers kept when idle.
        #[arg(long, default_value = "4")]
        min_workers: usize,
        /// How long to wait, when stopping, for API requests and probes in flight.
        #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
        shutdown_grace: Duration,
        /// How long to keep serving, when stopping, after /readyz turns 503: at least the period
        /// times the failure threshold of whatever polls /readyz.
        #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
        drain_delay: Duration,
        /// Directory for state that survives restarts: operator maintenance, the alerts'
        /// outbox and, unless the config's `history` section says otherwise, the history
        /// (`history.db`, SQLite). Default: `$STATE_DIRECTORY` when systemd sets it
        /// (`StateDirectory=`), else `data` in the working directory; `none` keeps nothing.
        #[arg(long, value_name = "DIR|none")]
        state_dir: Option<PathBuf>,
        /// Serve the status page at `/` and `/status`.
        #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
        ui: bool,
        /// A token the status page's reads need (`Authorization: Bearer`, or `?token=` once,
        /// which sets a cookie); without one they need none.
        #[arg(long, env = "PROBE_ENGINE_UI_TOKEN", hide_env_values = true)]
        ui_token: Option<String>,
        /// An operator bearer token, `TOKEN` or `NAME=TOKEN` (the name is what the audit log
        /// shows): it may read and change. Repeatable. Without one, only loopback peers may
        /// change anything, and only while the API listens on loopback alone.
        #[arg(long, env = "PROBE_ENGINE_API_TOKEN", hide_env_values = true)]
        api_token: Vec<String>,
        /// A file of operator tokens, one `TOKEN` or `NAME=TOKEN` a line (a mounted Kubernetes
        /// Secret); read again on SIGHUP. Repeatable.
        #[arg(long, value_name = "PATH")]
        api_token_file: Vec<PathBuf>,
        /// A read bearer token, `TOKEN` or `NAME=TOKEN`: with one, reads (`/v1`, `/health`,
        /// `/metrics`) need a read or operator token. Repeatable.
        #[arg(long, hide_env_values = true)]
        read_token: Vec<String>,
        /// A file of read tokens, as --api-token-file; read again on SIGHUP. Repeatable.
        #[arg(long, value_name = "PATH")]
        read_token_file: Vec<PathBuf>,
        /// Reload when the config changes on disk (editors' rename-on-save and Kubernetes
        /// ConfigMap updates included), as SIGHUP does.
        #[arg(long)]
        watch_config: bool,
        /// A web config as Prometheus exporters take it (`--web.config.file`): TLS and client
        /// certificates on the API and the gRPC listener, `basic_auth_users` (bcrypt), security
        /// headers and a rate limit. Read again on SIGHUP and whenever it or a file it names
        /// changes: a rotated certificate serves the next connection.
        #[arg(
            long,
            alias = "web.config.file",
            env = "PROBE_ENGINE_WEB_CONFIG",
            value_name = "FILE"
        )]
        web_config: Option<PathBuf>,
        /// How late the engine may wake before it counts itself starved: it then widens probe
        /// timeouts and defers timeout verdicts instead of blaming targets (Lifeguard's local
        /// health). `0s` turns this off.
        #[arg(long, default_value = "50ms", value_parser = humantime::parse_duration)]
        self_lag_threshold: Duration,
        /// This daemon's name in the cluster its config's `cluster` section describes
        /// (`[a-z0-9._-]+`, unique among the members); over the section's `member`.
        #[arg(long, value_name = "NAME")]
        member: Option<String>,
        /// Serve blackbox_exporter's `GET /probe?module=M&target=T` from the modules of this
        /// blackbox.yml (read again on SIGHUP), so its scrape jobs work unchanged. Off by
        /// default: whoever reaches it can make the daemon connect anywhere.
        #[arg(long, value_name = "FILE")]
        blackbox_config: Option<PathBuf>,
        /// What `/probe` may probe: CIDRs (`10.0.0.0/8`), addresses and host globs
        /// (`*.internal`), comma-separated or repeated. Without any, every target.
        #[arg(long, value_name = "LIST", requires = "blackbox_config")]
        blackbox_allow: Vec<String>,
        /// The most `/probe` probes at once; past it, and while the scheduled probes take the
        /// whole --max-in-flight, `/probe` answers 429.
        #[arg(long, default_value = "64", requires = "blackbox_config")]
        blackbox_max_in_flight: NonZeroUsize,
    },
    /// Validate a config: exit 0 with a summary, or 1 with every error.
    Check {
        /// A YAML file, or a directory whose *.yaml and *.yml files are merged.
        #[arg(long, short, default_value = "probes")]
        config: PathBuf,
        /// Also validate this web config, with the files it names.
        #[arg(long, value_name = "FILE")]
        web_config: Option<PathBuf>,
    },
    /// Drive a running daemon through its API: list, explain, put in maintenance, follow.
    /// Exit 0 done, 1 the API said no, 2 a usage error, 3 the daemon could not be reached,
    /// 4 it refused the token.
    Ctl(ctl::Ctl),
    /// Print a shell completion script for bash, zsh or fish.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff), for `man -l -` or a man directory.
    Man,
    /// Translate another tool's config into this daemon's YAML, on stdout. What it cannot
    /// express is said on stderr, one line each; exit 2 for input that cannot be read.
    Import {
        #[command(subcommand)]
        source: ImportSource,
    },
}

/// The tools `import` reads.
#[derive(Subcommand)]
enum ImportSource {
    /// A Gatus config (`endpoints:` with conditions).
    Gatus {
        /// The Gatus config file.
        file: PathBuf,
        /// Exit 1 when anything could not be expressed.
        #[arg(long)]
        strict: bool,
    },
    /// A blackbox_exporter `blackbox.yml`, one target per (module, target).
    Blackbox {
        /// The `blackbox.yml`.
        file: PathBuf,
        /// The targets: a Prometheus file_sd list (JSON or YAML), or a prometheus.yml whose
        /// jobs with `metrics_path: /probe` name them. Without it, only the modules are checked.
        #[arg(long)]
        targets: Option<PathBuf>,
        /// Exit 1 when anything could not be expressed.
        #[arg(long)]
        strict: bool,
    },
}

/// How long the config must be quiet before a watched change reloads it: an editor's save or a
/// ConfigMap swap is several events.
const CONFIG_DEBOUNCE: Duration = Duration::from_millis(200);

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    match cli.command {
        Command::Check { config, web_config } => match web_config {
            Some(web) if check_web(&web) == ExitCode::FAILURE => {
                // Both are checked, so that one run shows every error.
                let _ = check(&config);
                ExitCode::FAILURE
            }
            _ => check(&config),
        },
        Command::Ctl(ctl) => ctl::run(ctl),
        Command::Completions { shell } => {
            // Into memory first: the generator panics on a write error (a closed pipe).
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "probe-engine", &mut script);
            print_all(&script)
        }
        Command::Man => {
            let mut page = Vec::new();
            match clap_mangen::Man::new(Cli::command()).render(&mut page) {
                Ok(()) => print_all(&page),
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Import { source } => match source {
            ImportSource::Gatus { file, strict } => import(
                &file,
                strict,
                probe_engine::import::gatus::import(&file).and_then(|i| i.printed(&file)),
            ),
            ImportSource::Blackbox {
                file,
                targets,
                strict,
            } => import(
                &file,
                strict,
                probe_engine::import::blackbox::import(&file, targets.as_deref()),
            ),
        },
        Command::Run {
            config,
            listen,
            grpc_listen,
            max_in_flight,
            min_workers,
            shutdown_grace,
            drain_delay,
            state_dir,
            api_token,
            api_token_file,
            read_token,
            read_token_file,
            watch_config,
            web_config,
            self_lag_threshold,
            member,
            ui,
            ui_token,
            blackbox_config,
            blackbox_allow,
            blackbox_max_in_flight,
        } => {
            let options = daemon::Options {
                config,
                member,
                engine: EngineConfig {
                    scheduler: SchedulerConfig {
                        max_in_flight,
                        min_workers,
                        ..SchedulerConfig::default()
                    },
                    self_health: (!self_lag_threshold.is_zero()).then(|| SelfHealthConfig {
                        threshold: self_lag_threshold,
                        ..SelfHealthConfig::default()
                    }),
                    ..EngineConfig::default()
                },
                state_dir: state_dir_or_default(state_dir, std::env::var_os("STATE_DIRECTORY")),
                tokens: probe_engine::api::TokenSources {
                    operator: api_token,
                    operator_files: api_token_file,
                    read: read_token,
                    read_files: read_token_file,
                },
                drain_delay,
                ui: ui.then_some(probe_engine::api::Ui { token: ui_token }),
                blackbox: blackbox_config.map(|config| probe_engine::adhoc::AdHocOptions {
                    config,
                    allow: blackbox_allow,
                    max_in_flight: blackbox_max_in_flight.get(),
                }),
                web_config,
            };
            match run(options, listen, grpc_listen, shutdown_grace, watch_config) {
                Ok(code) => code,
                Err(e) => {
                    tracing::error!("{e:#}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// Writes `bytes` to stdout; a reader that went away (`| head`) is no failure of ours.
fn print_all(bytes: &[u8]) -> ExitCode {
    use std::io::Write as _;
    match std::io::stdout().write_all(bytes) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
        _ => ExitCode::SUCCESS,
    }
}

/// Where state goes: the flag's directory (none for `none`); without the flag, systemd's
/// `$STATE_DIRECTORY` (the first, when `StateDirectory=` names several), else `data` in the
/// working directory, as Prometheus keeps `data/`, so that a first run keeps its history.
fn state_dir_or_default(
    flag: Option<PathBuf>,
    systemd: Option<std::ffi::OsString>,
) -> Option<PathBuf> {
    match flag {
        Some(dir) if dir.as_os_str() == "none" => None,
        Some(dir) => Some(dir),
        None => Some(
            systemd
                .as_deref()
                .and_then(|dirs| {
                    std::env::split_paths(dirs).find(|dir| !dir.as_os_str().is_empty())
                })
                .unwrap_or_else(|| PathBuf::from("data")),
        ),
    }
}

/// Checks a web config: a summary on stdout, or every error on stderr.
fn check_web(path: &std::path::Path) -> ExitCode {
    match probe_engine::web::load(path) {
        Ok(web) => {
            let mut parts = vec![
                if web.tls.is_some() {
                    "TLS"
                } else {
                    "plain HTTP"
                }
                .to_owned(),
            ];
            if !web.users.is_empty() {
                parts.push("basic auth".to_owned());
            }
            if !web.headers.is_empty() {
                parts.push(plural(web.headers.len(), "header"));
            }
            if web.rate.is_some() {
                parts.push("a rate limit".to_owned());
            }
            println!("ok: web config: {} ({})", parts.join(", "), path.display());
            ExitCode::SUCCESS
        }
        Err(errors) => {
            eprintln!("{errors}");
            eprintln!("{} in {}", plural(errors.0.len(), "error"), path.display());
            ExitCode::FAILURE
        }
    }
}

/// `1 group`, `2 groups`.
fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("{n} {word}")
    } else {
        format!("{n} {word}s")
    }
}

fn check(path: &std::path::Path) -> ExitCode {
    match probe_config::load(path) {
        Ok(config) => {
            let groups = config
                .topology
                .nodes
                .iter()
                .filter(|n| n.kind == probe::graph::NodeKind::Group)
                .count();
            // By kind, in the order of `ProbeSpec::KINDS`: what each file declared, at a glance.
            let kinds: Vec<String> = probe::tier::ProbeSpec::KINDS
                .iter()
                .filter_map(|kind| {
                    let n = config
                        .topology
                        .targets
                        .iter()
                        .filter(|t| t.probe.kind() == *kind)
                        .count();
                    (n > 0).then(|| format!("{kind} {n}"))
                })
                .collect();
            let kinds = if kinds.is_empty() {
                String::new()
            } else {
                format!(" ({})", kinds.join(", "))
            };
            println!(
                "ok: {}{kinds} and {} ({}) in {} ({})",
                plural(config.topology.targets.len(), "target"),
                plural(groups, "group"),
                plural(config.topology.pools.len(), "pool"),
                plural(config.files.len(), "file"),
                path.display()
            );
            ExitCode::SUCCESS
        }
        Err(errors) => {
            eprintln!("{errors}");
            eprintln!("{} in {}", plural(errors.0.len(), "error"), path.display());
            ExitCode::FAILURE
        }
    }
}

/// Writes an import's YAML to stdout and what it could not express to stderr, a line each.
/// Exit 0, or 1 with `strict` when something could not be expressed, or 2 when the input could
/// not be read.
fn import(
    file: &std::path::Path,
    strict: bool,
    printed: Result<probe_engine::import::Printed, probe_config::ConfigErrors>,
) -> ExitCode {
    let printed = match printed {
        Ok(printed) => printed,
        Err(errors) => {
            eprintln!("{errors}");
            eprintln!("{} errors in {}", errors.0.len(), file.display());
            return ExitCode::from(2);
        }
    };
    print!("{}", printed.yaml);
    for note in &printed.notes {
        eprintln!("{note}");
    }
    if strict && !printed.notes.is_empty() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

#[tokio::main]
async fn run(
    options: daemon::Options,
    listen: SocketAddr,
    grpc_listen: Option<SocketAddr>,
    grace: Duration,
    watch_config: bool,
) -> anyhow::Result<ExitCode> {
    let metrics = install_metrics()?;
    let mut options = options;
    let descriptors = limits::raise(options.engine.scheduler.max_in_flight);
    options.engine.scheduler.max_in_flight = descriptors.max_in_flight;
    metrics::gauge!("probe_engine_fd_limit").set(descriptors.limit as f64);
    let cancel = CancellationToken::new();
    let config = options.config.clone();
    let daemon = match Daemon::start(options, cancel.clone()) {
        Ok(d) => d,
        Err(daemon::StartError::Config(errors)) => {
            eprintln!("{errors}");
            eprintln!("{} errors in {}", errors.0.len(), config.display());
            return Ok(ExitCode::FAILURE);
        }
        Err(e) => return Err(e.into()),
    };
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding the API to {listen}"))?;
    // After the bind, so that the member record gives the address the API listens on.
    match daemon.join_cluster(listener.local_addr()?).await {
        Ok(()) => {}
        Err(daemon::StartError::Cluster(e)) => {
            eprintln!("cluster: {e}");
            return Ok(ExitCode::FAILURE);
        }
        Err(e) => return Err(e.into()),
    }
    if let Some(addr) = grpc_listen {
        let grpc = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("binding gRPC health to {addr}"))?;
        daemon.serve_grpc_health(grpc);
    }
    let mut hangup = signal(SignalKind::hangup()).context("installing the SIGHUP handler")?;
    let mut terminate =
        signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    tokio::spawn(daemon::metrics_upkeep(
        metrics.clone(),
        Duration::from_secs(5),
        cancel.clone(),
    ));
    if watch_config {
        let watcher = watch::watch_config(
            config,
            CONFIG_DEBOUNCE,
            daemon.topology().reload_trigger(),
            cancel.clone(),
        );
        tokio::spawn(async move {
            if let Err(e) = watcher.await {
                tracing::error!(error = %e, "not watching the config");
            }
        });
    }
    let serving = daemon.serve(listener, Some(metrics), grace);
    tokio::pin!(serving);
    loop {
        tokio::select! {
            result = &mut serving => {
                result.context("serving the API")?;
                break;
            }
            _ = hangup.recv() => {
                tracing::info!("SIGHUP: reloading config");
                // The result is logged, and shown in /v1/topology.
                daemon.reload();
            }
            // The first signal stops gracefully; a second one stops at once.
            _ = terminate.recv() => stop(&daemon, "SIGTERM"),
            _ = interrupt.recv() => stop(&daemon, "SIGINT"),
        }
    }
    tracing::info!("stopped");
    Ok(ExitCode::SUCCESS)
}

/// Starts the stop sequence, or ends it at once when it is running already.
fn stop(daemon: &Daemon, signal: &str) {
    if daemon.stopping() {
        tracing::info!("{signal} while stopping: stopping now");
        daemon.stop_now();
    } else {
        tracing::info!("{signal}: stopping: not ready, draining, then exiting");
        daemon.stop();
    }
}

fn install_metrics() -> anyhow::Result<PrometheusHandle> {
    let handle = daemon::prometheus_builder()?
        .install_recorder()
        .context("installing the metrics recorder")?;
    daemon::describe_metrics();
    Ok(handle)
}

fn init_logging(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}
