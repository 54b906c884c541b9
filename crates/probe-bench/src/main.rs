//! `probe-bench`: the load harnesses `scripts/bench` runs, one subcommand each, and the writer of
//! `BENCHMARKS.md`.
//!
//! ```text
//! cargo build --release -p probe-bench
//! ./target/release/probe-bench <SUBCOMMAND> [FLAGS]    # --help on any of them lists its flags
//! ```
//!
//! One binary rather than one example each: the harnesses share their fixtures ([`support`])
//! and their dependencies, which an example cannot declare apart from the root package's tests,
//! and a subcommand's flags are declared once, with their defaults, so `--help` and the errors
//! come from clap. Every harness prints its figures as `RESULT` lines through
//! [`support::result`], the only writer of that format; `report` reads them back.
//!
//! Some harnesses start this same binary again as a helper process (the HTTP server of
//! `http-load`, the gRPC server of `breadth-load`, the TLS server of `tls-load`; the responder,
//! prober and burners of `starve`), through flags hidden from
//! `--help`: a process of its own keeps the helper's CPU out of the prober's figures.

mod adhoc_load;
mod alerts_load;
mod api_load;
mod breadth_load;
mod churn;
mod cluster_load;
mod cluster_sim;
mod detection;
mod drain;
mod etcd_load;
mod history_load;
mod http_load;
mod keepalive;
mod loss;
mod report;
mod scheduler_load;
mod starve;
mod support;
mod tcp_load;
mod tls_load;

use clap::{Parser, Subcommand};

/// The benchmark harnesses of probe-engine and the report writer.
#[derive(Parser)]
#[command(name = "probe-bench")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// TCP probes per CPU-second: the engine vs a bare tokio loop vs blackbox_exporter.
    TcpLoad(tcp_load::Args),
    /// HTTP probes per CPU-second, pooled and fresh connections, vs blackbox_exporter.
    HttpLoad(http_load::Args),
    /// gRPC, DNS and ICMP probes per CPU-second vs blackbox_exporter's modules.
    BreadthLoad(breadth_load::Args),
    /// The engine with 10k TLS certificate targets a minute: scheduler lag and CPU.
    TlsLoad(tls_load::Args),
    /// Scheduling lag, spread and memory with many no-op targets.
    SchedulerLoad(scheduler_load::Args),
    /// The daemon's health API under wrk while it probes 10k targets a second.
    ApiLoad(api_load::Args),
    /// `GET /probe` under wrk: CPU a request and scrapes/s at p99 <= 50 ms, vs
    /// blackbox_exporter's.
    AdhocLoad(adhoc_load::Args),
    /// Time to DOWN vs theory, false DOWN rate vs the binomial model, a blackhole cascade.
    Detection(detection::Args),
    /// False DOWNs of a CPU-starved prober with and without self-health awareness.
    Starve(starve::Args),
    /// An order_service instance stopped behind haproxy, with and without a drain delay.
    Drain(drain::Args),
    /// Real SYN loss in network namespaces vs the binomial model (needs root and nft).
    Loss(loss::Args),
    /// Pooled HTTP probes against nginx closing kept-alive connections.
    Keepalive(keepalive::Args),
    /// The etcd topology source at scale, against a throw-away etcd.
    EtcdLoad(etcd_load::Args),
    /// The real daemon's RSS, descriptors and /metrics under ten minutes of topology churn.
    Churn(churn::Args),
    /// Cluster target ownership at scale: moves on a join or leave, load spread, update time.
    ClusterSim(cluster_sim::Args),
    /// Real daemons as a cluster through etcd: CPU per probe vs one daemon, failover, writes.
    ClusterLoad(cluster_load::Args),
    /// The daemon's alerting in a storm of 10k DOWNs: one root cause and independent targets,
    /// to Alertmanager and a webhook, vs Prometheus alerting per target.
    AlertsLoad(alerts_load::Args),
    /// The daemon's history: CPU of recording 10k probes/s (on vs off), bytes per target per
    /// day after a simulated week (SQLite, PostgreSQL), uptime query time over 90 days.
    HistoryLoad(history_load::Args),
    /// Writes BENCHMARKS.md from the logs of a scripts/bench run.
    Report(report::Args),
    /// Prints one RESULT line, for a figure a script derives from a log.
    Result(ResultArgs),
}

/// One figure, as the harnesses print theirs.
#[derive(clap::Args)]
struct ResultArgs {
    /// The scenario the figure belongs to.
    #[arg(long)]
    scenario: String,
    /// The figure's name.
    #[arg(long)]
    metric: String,
    /// Its value.
    #[arg(long, allow_negative_numbers = true)]
    value: f64,
    /// Its unit.
    #[arg(long)]
    unit: String,
}

fn main() -> std::process::ExitCode {
    let result = match Cli::parse().command {
        Command::TcpLoad(args) => tcp_load::run(args),
        Command::HttpLoad(args) => http_load::run(args),
        Command::BreadthLoad(args) => breadth_load::run(args),
        Command::TlsLoad(args) => tls_load::run(args),
        Command::SchedulerLoad(args) => scheduler_load::run(args),
        Command::ApiLoad(args) => api_load::run(args),
        Command::AdhocLoad(args) => adhoc_load::run(args),
        Command::Detection(args) => detection::run(args),
        Command::Starve(args) => starve::run(args),
        Command::Drain(args) => drain::run(args),
        Command::Loss(args) => loss::run(args),
        Command::Keepalive(args) => keepalive::run(args),
        Command::EtcdLoad(args) => etcd_load::run(args),
        Command::Churn(args) => churn::run(args),
        Command::ClusterSim(args) => cluster_sim::run(args),
        Command::ClusterLoad(args) => cluster_load::run(args),
        Command::AlertsLoad(args) => alerts_load::run(args),
        Command::HistoryLoad(args) => history_load::run(args),
        Command::Report(args) => report::run(args),
        Command::Result(figure) => {
            support::result(&figure.scenario, &figure.metric, figure.value, &figure.unit);
            Ok(())
        }
    };
    support::exit(result)
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::Cli;

    /// Clap checks a command's definition (ids that clash, defaults its parsers refuse) only in
    /// debug builds and only for the subcommand used: this checks every one at once.
    #[test]
    fn every_subcommand_is_well_formed() {
        Cli::command().debug_assert();
    }

    /// The command lines `scripts/bench` runs, each subcommand on its defaults and the helper
    /// processes' command lines parse.
    #[test]
    fn the_bench_command_lines_parse() {
        let lines = [
            "tcp-load --scenario tcp --duration-s 1 --warmup-s 0.5",
            "tcp-load --scenario tcp --duration-s 2 --warmup-s 0.5",
            "http-load --duration-s 1 --warmup-s 0.5",
            "breadth-load --kinds grpc,dns,icmp --duration-s 1 --warmup-s 0.5",
            "breadth-load --kinds grpc,dns --duration-s 2 --warmup-s 0.5",
            "tls-load --targets 1000 --interval-s 5 --intervals 2",
            "tls-load --targets 10000 --interval-s 60 --intervals 2",
            "tcp-load --scenario scale-100k-tcp --targets 100000 --interval-ms 10000 --phase \
             engine --warmup-s 11 --duration-s 2",
            "scheduler-load --scenario scale-1m --targets 1000000 --metrics lag --interval-s 10 \
             --intervals 3",
            "detection --scenario all --fd-duration-s 3 --cas-baseline-s 2 --cas-after-s 3",
            "starve --starve-first-s 4 --duration-s 1",
            "api-load --duration-s 2",
            "drain --before-s 0.5",
            "cluster-sim --targets 100000",
            "cluster-sim",
            "cluster-load --targets 3000 --interval-ms 2000 --warmup-s 3 --duration-s 5 \
             --failover-runs 2 --failover-targets 600",
            "cluster-load",
            "alerts-load --targets 1000 --storm-s 5",
            "alerts-load",
            "history-load --targets 2000 --warmup-s 3 --window-s 5 --windows 2 --week-targets \
             100 --week-targets-1s 10 --week-days 2 --queries 10",
            "history-load",
            "history-load --phases week,query --no-postgres",
            "history-load --control --phases cpu",
            "loss --duration-s 20",
            "keepalive --duration-s 10",
            "churn --duration-s 150 --warmup-s 60",
            "tcp-load --scenario hygiene --targets 2000 --interval-ms 100 --phase engine \
             --warmup-s 2 --duration-s 300 --windows 5",
            "result --scenario hygiene --metric eaddrnotavail_lines --value 0 --unit lines",
            "report LOGS OUT.md",
            "http-load",
            "breadth-load",
            "tls-load",
            "breadth-load --kinds dns,icmp --blackbox none",
            "scheduler-load",
            "detection",
            "starve",
            "drain",
            "loss",
            "keepalive",
            "etcd-load",
            "churn",
            "tcp-load --floor-timeout --phase floor",
            "drain --modes no-delay",
            "loss --losses 1,2,3",
            // The helper processes the harnesses start.
            "http-load --serve 1",
            "breadth-load --serve-grpc 1",
            "tls-load --serve 1 --ca-file /tmp/ca.pem",
            "starve --serve",
            "starve --burn",
            "starve --probe on --addrs 127.0.0.2:1,127.0.0.3:2 --targets 500 --interval-ms 500 \
             --timeout-ms 50 --fall 2 --starve-first-s 4 --duration-s 1",
        ];
        for line in lines {
            let argv = std::iter::once("probe-bench").chain(line.split_whitespace());
            if let Err(e) = Cli::try_parse_from(argv) {
                panic!("{line}: {e}");
            }
        }
    }
}
