//! The `agentry` binary: `serve` runs the service, `check` lints persona directories.

use std::{
    path::{Path, PathBuf},
    process::ExitCode,
};

use agentry::{check, config::Config, grpc::Listener, telemetry};
use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use tokio_util::sync::CancellationToken;

/// mimalloc instead of the system allocator: discovery builds and every RPC allocate many small
/// values across threads, which glibc's malloc serves at about twice the cost (a cold discovery
/// of 10,000 files parses in two thirds of the time).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// agentry: the registry of agent personas and the supervisor of their workers.
#[derive(Parser)]
#[command(
    version,
    about,
    long_about = "agentry is the gRPC service a multi-agent system runs beside its coordinator: it \
knows which agent personas exist (markdown or TOML files in .claude, .codex, .gemini and .xcsh \
directories, plugins and bundled agents), resolves one into exactly what a worker gets (prompt, \
tools, spawn rights, limits), spawns and supervises the workers (a process, a runner of the \
coordinator's own runtime, or agentry's own agent loop over an OpenAI-compatible API), streams \
their progress, stops them, and gates risky actions behind a reviewer agent.",
    after_help = "Start here:\n  agentry serve                      the service on 127.0.0.1:50051, embedded defaults\n  agentry check --workspace .        lint the personas this workspace would see\n\nDocumentation: README.md, docs/guide.md, and the specification in docs/."
)]
struct Cli {
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gRPC service (embedded defaults; no config file needed).
    ///
    /// Listens on 127.0.0.1:50051, reads the personas of $HOME's families and the bundled
    /// agents, and keeps workers in a SQLite file under $XDG_STATE_HOME/agentry (or
    /// ~/.local/state/agentry). Workers run on the configured executor; with none configured
    /// and OPENAI_API_KEY set they run on the model executor (OPENAI_BASE_URL, OPENAI_MODEL),
    /// and with neither every SpawnWorker is FAILED_PRECONDITION saying so.
    #[command(
        after_help = "Environment:\n  AGENTRY_LISTEN, AGENTRY_HOME, AGENTRY_STORE_URL, AGENTRY_<KEY>   override scalar config keys\n  OPENAI_API_KEY, OPENAI_BASE_URL, OPENAI_MODEL                  the implicit model executor\n  OTEL_EXPORTER_OTLP_ENDPOINT                                    export traces and metrics (OTLP)\n  RUST_LOG                                                        log filter (default info)\n\nExamples:\n  agentry serve --config examples/walkthrough.yaml\n  AGENTRY_LISTEN=unix:/run/agentry.sock agentry serve\n  AGENTRY_STORE_URL=postgres://agentry@db:5432/agentry agentry serve   # one of several replicas"
    )]
    Serve {
        /// YAML configuration file (docs §8.1); `AGENTRY_*` variables override scalar keys.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Once the service is up (listener bound, store and executors open), print one line
        /// `listening <address>` on stdout: the address really bound (the port chosen for
        /// `listen: 127.0.0.1:0`, or `unix:/path`). For scripts and tests; a start that fails
        /// prints nothing; health says when discovery is ready.
        #[arg(long)]
        print_addr: bool,
    },
    /// Lint persona files: load agents exactly like the service and print the merged list,
    /// shadowed entries, every diagnostic with its file and line, and hints.
    ///
    /// Without DIRs it reads what the service would: the families' user dirs under the home,
    /// plugin agent dirs, the configured agent_dirs and the bundled agents (with --workspace,
    /// first the project dirs found walking up from it). With DIRs it reads those directories
    /// only, in order: no other source and no bundled agents, so the listing is exactly what
    /// they hold.
    #[command(after_help = CHECK_AFTER_HELP)]
    Check {
        /// YAML configuration file (home, families, agent_dirs, bundled_agents, ...).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Also read the project dirs found walking up from this directory.
        #[arg(long, conflicts_with = "dirs")]
        workspace: Option<PathBuf>,
        /// Read each DIR as DIR/**/*.md (README.md and hidden entries skipped), like a
        /// recursive agent_dirs entry.
        #[arg(short, long, requires = "dirs")]
        recursive: bool,
        /// Output: text for people, one JSON document, or GitHub workflow commands
        /// (::error file=...,line=...::...) that annotate the files in a pull request.
        #[arg(long, value_enum, default_value_t = CheckFormat::Text)]
        format: CheckFormat,
        /// Read only these directories instead of the configured sources; each must exist.
        dirs: Vec<PathBuf>,
    },
    /// Manage the git worktrees kept by isolated workers (docs/workers.md §6.10).
    Worktrees {
        #[command(subcommand)]
        action: WorktreesAction,
    },
}

#[derive(Subcommand)]
enum WorktreesAction {
    /// Remove kept worktrees (and their `agentry/<worker_id>` branches) older than a bound.
    ///
    /// For a host whose service is stopped: this does not know which workers still run. While
    /// the service serves, call its PruneWorktrees RPC, which never touches a live worker's.
    Prune {
        /// YAML configuration file (for workers.worktrees_dir and the store path).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Only worktrees last changed longer ago than this (`7d`, `12h`, `0s` for all).
        #[arg(long, default_value = "7d", value_parser = humantime::parse_duration)]
        older_than: std::time::Duration,
    },
}

const CHECK_AFTER_HELP: &str = "\
Examples:
  agentry check                          what the service would read ($HOME's families, bundled)
  agentry check --workspace .            plus the project dirs found walking up from here
  agentry check -r ./personas            only these directories, recursively
  agentry check --format github .claude/agents   annotations for a pull request

Exit status:
  0  no errors (warnings allowed)
  1  at least one error diagnostic: a persona file that does not load
  2  usage error, nothing linted: a bad option, a DIR or --workspace that does not exist or is
     not a directory, an invalid --config";

#[derive(Clone, Copy, ValueEnum)]
enum CheckFormat {
    /// Sections for people (the default).
    Text,
    /// One JSON document: agents, shadowed, diagnostics, hints, summary.
    Json,
    /// GitHub Actions workflow commands, one per diagnostic, then a summary line.
    Github,
}

impl From<CheckFormat> for check::Format {
    fn from(f: CheckFormat) -> Self {
        match f {
            CheckFormat::Text => Self::Text,
            CheckFormat::Json => Self::Json,
            CheckFormat::Github => Self::Github,
        }
    }
}

impl From<LogFormat> for telemetry::LogFormat {
    fn from(f: LogFormat) -> Self {
        match f {
            LogFormat::Text => Self::Text,
            LogFormat::Json => Self::Json,
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = tokio::runtime::Runtime::new()
        .context("cannot start the tokio runtime")
        .and_then(|rt| {
            // Only the service exports spans and metrics; `check` just logs.
            let mut settings =
                telemetry::Settings::from_env(cli.log_format.into(), std::env::vars());
            if !matches!(cli.command, Command::Serve { .. }) {
                settings.otlp = telemetry::Otlp::Off;
            }
            // The OTLP exporters spawn onto the runtime that is current while they are built.
            let telemetry = {
                let _rt = rt.enter();
                telemetry::init(&settings)?
            };
            let result = match cli.command {
                Command::Serve { config, print_addr } => serve(&rt, config, print_addr),
                Command::Check {
                    config,
                    workspace,
                    recursive,
                    format,
                    dirs,
                } => check(
                    config,
                    &check::Options {
                        workspace,
                        dirs,
                        recursive,
                    },
                    format.into(),
                ),
                Command::Worktrees {
                    action: WorktreesAction::Prune { config, older_than },
                } => prune_worktrees(&rt, config, older_than),
            };
            // Flush spans and metrics while the runtime that sends them still runs.
            telemetry.shutdown();
            result
        });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("agentry: {e:#}");
            // For `check` this is its usage error; for `serve`, any failure to start.
            ExitCode::from(check::EXIT_USAGE)
        }
    }
}

/// `agentry worktrees prune`: prints each worktree removed, and each that could not be.
fn prune_worktrees(
    rt: &tokio::runtime::Runtime,
    config: Option<PathBuf>,
    older_than: std::time::Duration,
) -> anyhow::Result<ExitCode> {
    let cfg = load_config(config)?;
    let dir = cfg.worktrees_dir();
    let (removed, failed) = rt.block_on(agentry::workers::worktree::prune(&dir, older_than));
    for r in &removed {
        println!("removed {r}");
    }
    for f in &failed {
        eprintln!("agentry: cannot remove {f}");
    }
    println!(
        "{} worktrees removed from {}, {} failed",
        removed.len(),
        dir.display(),
        failed.len()
    );
    Ok(if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn load_config(path: Option<PathBuf>) -> anyhow::Result<Config> {
    Ok(Config::load(path.as_deref(), std::env::vars())?)
}

/// Runs the service until SIGTERM/SIGINT, then drains for at most `shutdown_grace`; a second
/// signal exits at once. With `print_addr`, the bound address goes to stdout once it is up.
fn serve(
    rt: &tokio::runtime::Runtime,
    config: Option<PathBuf>,
    print_addr: bool,
) -> anyhow::Result<ExitCode> {
    let cfg = load_config(config)?;
    rt.block_on(async move {
        let listener = Listener::bind(&cfg.listen)
            .await
            .with_context(|| format!("cannot listen on {}", cfg.listen))?;
        let socket = listener.socket_path().map(Path::to_owned);
        let stop = CancellationToken::new();
        watch_signals(stop.clone())?;
        // `grpc::run` owns the whole shutdown sequence and its one deadline (shutdown_grace).
        // The address is printed only once the service is up: a store held by another process
        // (or anything else that fails at start-up) exits without it.
        let drained = agentry::grpc::run_announced(
            cfg,
            listener,
            stop.cancelled_owned(),
            |listener, http| {
                if print_addr && let Err(e) = print_listening(listener, http) {
                    tracing::warn!(error = %e, "cannot print the listening address");
                }
            },
        )
        .await;
        if let Some(path) = socket {
            let _ = std::fs::remove_file(path);
        }
        drained
    })?;
    tracing::info!("agentry stopped");
    Ok(ExitCode::SUCCESS)
}

/// `listening <address>` on stdout, then `http listening <address>` with `http.listen`, flushed
/// at once: a reader waiting for them must not depend on buffering. Nothing else of `serve`
/// writes to stdout (logs go to stderr).
fn print_listening(listener: &Listener, http: Option<std::net::SocketAddr>) -> std::io::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    writeln!(out, "listening {}", listener.describe())?;
    if let Some(http) = http {
        writeln!(out, "http listening {http}")?;
    }
    out.flush()
}

/// First SIGTERM/SIGINT cancels `stop` (graceful shutdown); a second one exits immediately.
fn watch_signals(stop: CancellationToken) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    tokio::spawn(async move {
        let mut seen = 0;
        loop {
            let name = tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
            };
            seen += 1;
            if seen == 1 {
                tracing::info!(
                    signal = name,
                    "shutting down; a second signal exits at once"
                );
                stop.cancel();
            } else {
                tracing::warn!(signal = name, "second signal; exiting without draining");
                agentry::telemetry::flush_logs();
                std::process::exit(130);
            }
        }
    });
    Ok(())
}

/// Lints, prints the report on stdout and returns its exit status; a usage error (a missing
/// directory, a bad config) is an `Err`, which `main` turns into exit status 2.
fn check(
    config: Option<PathBuf>,
    opts: &check::Options,
    format: check::Format,
) -> anyhow::Result<ExitCode> {
    let cfg = load_config(config)?;
    let report = check::run(&cfg, opts)?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    report
        .write(format, &mut out)
        .and_then(|()| std::io::Write::flush(&mut out))
        .context("cannot write the report")?;
    Ok(ExitCode::from(report.exit_code()))
}
