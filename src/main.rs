//! The `agentry` binary: `serve` runs the service, `check` lints persona directories.

use std::{
    path::{Path, PathBuf},
    process::ExitCode,
};

use agentry::{config::Config, discovery::Registry, grpc::Listener, persona::Severity, telemetry};
use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use tokio_util::sync::CancellationToken;

/// agentry: the registry of agent personas and the supervisor of their workers.
#[derive(Parser)]
#[command(version, about)]
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
    Serve {
        /// YAML configuration file (SPEC §8.1); `AGENTRY_*` variables override scalar keys.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Load agents and workflow commands exactly like the service and print the merged lists,
    /// shadowed entries and every diagnostic. Exit status 1 when there are errors.
    Check {
        /// YAML configuration file.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Workspace whose project directories are read.
        #[arg(long)]
        workspace: Option<PathBuf>,
        /// Read only these agent directories (`*.md` at the top level, `*.toml` at any depth)
        /// instead of the configured sources; no commands and no bundled definitions then.
        dirs: Vec<PathBuf>,
    },
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
                Command::Serve { config } => serve(&rt, config),
                Command::Check {
                    config,
                    workspace,
                    dirs,
                } => check(config, workspace, dirs),
            };
            // Flush spans and metrics while the runtime that sends them still runs.
            telemetry.shutdown();
            result
        });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("agentry: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn load_config(path: Option<PathBuf>) -> anyhow::Result<Config> {
    Ok(Config::load(path.as_deref(), std::env::vars())?)
}

/// Runs the service until SIGTERM/SIGINT, then drains for at most `shutdown_grace`; a second
/// signal exits at once.
fn serve(rt: &tokio::runtime::Runtime, config: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let cfg = load_config(config)?;
    rt.block_on(async move {
        let listener = Listener::bind(&cfg.listen)
            .await
            .with_context(|| format!("cannot listen on {}", cfg.listen))?;
        let socket = listener.socket_path().map(Path::to_owned);
        let grace = cfg.shutdown_grace;
        let stop = CancellationToken::new();
        watch_signals(stop.clone())?;
        let server = agentry::grpc::run(cfg, listener, stop.clone().cancelled_owned());
        tokio::pin!(server);
        let drained = tokio::select! {
            r = &mut server => r,
            () = async { stop.cancelled().await; tokio::time::sleep(grace).await } => {
                tracing::warn!(grace = ?grace, "connections still open after shutdown_grace; closing them");
                Ok(())
            }
        };
        // Running workers are the worker layer's to kill: `grpc::run` sees `stop` fire through
        // its shutdown future (where health goes NOT_SERVING), within this bounded drain.
        if let Some(path) = socket {
            let _ = std::fs::remove_file(path);
        }
        drained
    })?;
    tracing::info!("agentry stopped");
    Ok(ExitCode::SUCCESS)
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
                std::process::exit(130);
            }
        }
    });
    Ok(())
}

fn check(
    config: Option<PathBuf>,
    workspace: Option<PathBuf>,
    dirs: Vec<PathBuf>,
) -> anyhow::Result<ExitCode> {
    let cfg = load_config(config)?;
    let registry = Registry::new(&cfg, false)?;
    let snap = if dirs.is_empty() {
        let ws = match workspace {
            Some(w) => Some(
                w.canonicalize()
                    .with_context(|| format!("workspace {}", w.display()))?,
            ),
            None => None,
        };
        registry.build_once(ws.as_deref())
    } else {
        let dirs = dirs
            .iter()
            .map(|d| {
                d.canonicalize()
                    .or_else(|_| std::path::absolute(d))
                    .with_context(|| format!("directory {}", d.display()))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        registry.build_dirs(&dirs)
    };
    println!("agents ({}):", snap.agents.len());
    for a in &snap.agents {
        println!(
            "  {:<32} {:<8} {}",
            a.persona.name,
            a.source.as_str(),
            a.file_path
        );
    }
    if !snap.shadowed.is_empty() {
        println!("shadowed ({}):", snap.shadowed.len());
        for a in &snap.shadowed {
            println!(
                "  {:<32} {} (shadowed by {})",
                a.persona.name,
                a.file_path,
                a.shadowed_by.as_deref().unwrap_or("?")
            );
        }
    }
    println!("commands ({}):", snap.commands.len());
    for c in &snap.commands {
        let aliases = if c.aliases.is_empty() {
            String::new()
        } else {
            format!(" (also {})", c.aliases.join(", "))
        };
        println!(
            "  {:<32} {:<8} {}{aliases}",
            c.name,
            c.source.as_str(),
            c.file_path
        );
    }
    if !snap.shadowed_commands.is_empty() {
        println!("shadowed commands ({}):", snap.shadowed_commands.len());
        for c in &snap.shadowed_commands {
            println!(
                "  {:<32} {} (shadowed by {})",
                c.name,
                c.file_path,
                c.shadowed_by.as_deref().unwrap_or("?")
            );
        }
    }
    let diagnostics: Vec<_> = snap.all_diagnostics().collect();
    let errors = diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .count();
    println!("diagnostics ({}, {} errors):", diagnostics.len(), errors);
    for d in diagnostics {
        println!("  {d}");
    }
    println!("registry_version: {}", snap.version);
    Ok(if errors > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
