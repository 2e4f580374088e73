//! The `agentry` binary: `serve` runs the service, `check` lints persona directories.

use std::{path::PathBuf, process::ExitCode};

use agentry::{config::Config, discovery::Registry, persona::Severity};
use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};

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
    /// Load agents exactly like the service and print the merged list, shadowed entries and
    /// every diagnostic. Exit status 1 when there are errors.
    Check {
        /// YAML configuration file.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Workspace whose project directories are read.
        #[arg(long)]
        workspace: Option<PathBuf>,
        /// Read only these directories (then the bundled agents) instead of the configured
        /// sources.
        dirs: Vec<PathBuf>,
    },
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    let result = match cli.command {
        Command::Serve { config } => serve(config),
        Command::Check {
            config,
            workspace,
            dirs,
        } => check(config, workspace, dirs),
    };
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

fn serve(config: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let cfg = load_config(config)?;
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&cfg.listen)
            .await
            .with_context(|| format!("cannot listen on {}", cfg.listen))?;
        agentry::grpc::run(cfg, listener, shutdown_signal()).await
    })?;
    Ok(ExitCode::SUCCESS)
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
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
    let errors = snap
        .diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .count();
    println!(
        "diagnostics ({}, {} errors):",
        snap.diagnostics.len(),
        errors
    );
    for d in &snap.diagnostics {
        println!("  {d}");
    }
    println!("registry_version: {}", snap.version);
    Ok(if errors > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
