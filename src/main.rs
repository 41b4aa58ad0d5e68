//! The `cva` command line: `cva run SCENARIO`, `cva bench solvers`.

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use cva::engine::Progress;
use cva::scenario::{Scenario, ScenarioError};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "cva",
    version,
    about = "Nested Monte Carlo CVA for portfolios with American options"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Simulate a scenario: CVA, exposure profile, solver statistics, reports.
    Run(RunArgs),
    /// Benchmarks.
    #[command(subcommand)]
    Bench(BenchCommand),
}

#[derive(Args)]
struct RunArgs {
    /// Scenario file (YAML).
    scenario: PathBuf,
    /// Override a scenario field, e.g. `--set simulation.outer_paths=20000` (repeatable).
    #[arg(long = "set", value_name = "FIELD=VALUE")]
    set: Vec<String>,
    /// Report directory (default `reports/<scenario name>`).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Print the summary as one JSON object on stdout.
    #[arg(long)]
    json: bool,
    /// No progress bars and no terminal summary (errors still go to stderr).
    #[arg(long, short)]
    quiet: bool,
    /// Worker threads (default: all cores).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// Override the scenario's backend.
    #[arg(long, value_parser = ["auto", "cpu", "gpu"])]
    backend: Option<String>,
    /// Do not write reports.
    #[arg(long)]
    no_report: bool,
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Time every solver strategy on generated batches of symmetric systems.
    Solvers(cva::bench::SolverBenchArgs),
    /// Run one scenario on each backend: wall time, phases, regressions/s, path-steps/s.
    Run(cva::bench::RunBenchArgs),
}

struct Bars {
    _multi: MultiProgress,
    paths: ProgressBar,
    dates: ProgressBar,
    /// Print notes (not `--quiet`).
    notes: bool,
}

impl Bars {
    /// Bars drawn on stderr when `visible`; notes printed when `notes`.
    fn new(outer_paths: usize, visible: bool, notes: bool) -> Self {
        let multi = MultiProgress::with_draw_target(if visible {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        });
        let style = |t: &str| ProgressStyle::with_template(t).expect("valid template");
        let paths = multi.add(ProgressBar::new(outer_paths as u64));
        paths.set_style(style(
            "outer paths {bar:40.cyan/blue} {pos}/{len} [{elapsed_precise} < {eta_precise}]",
        ));
        let dates = multi.add(ProgressBar::new(0));
        dates.set_style(style("dates       {bar:40.green/white} {pos}/{len}"));
        Self {
            _multi: multi,
            paths,
            dates,
            notes,
        }
    }
}

impl Progress for Bars {
    fn chunk_started(&self, _paths: usize, dates: usize) {
        self.dates.reset();
        self.dates.set_length(dates as u64);
    }
    fn date_done(&self) {
        self.dates.inc(1);
    }
    fn chunk_done(&self, paths: usize) {
        self.paths.inc(paths as u64);
    }
    fn note(&self, line: &str) {
        if self.notes {
            self.paths.suspend(|| eprintln!("{line}"));
        }
    }
}

fn run(args: RunArgs) -> Result<()> {
    let mut set = args.set.clone();
    if let Some(b) = &args.backend {
        set.push(format!("simulation.backend={b}"));
    }
    let scenario = Scenario::load(&args.scenario, &set)?;
    let show = !args.quiet;
    let bars = Bars::new(
        scenario.simulation.outer_paths,
        show && std::io::stderr().is_terminal(),
        show,
    );
    let out = cva::run::run(&scenario, args.threads, &bars)?;
    bars.paths.finish_and_clear();
    bars.dates.finish_and_clear();
    let written = if args.no_report {
        Vec::new()
    } else {
        let dir = args
            .out
            .clone()
            .unwrap_or_else(|| PathBuf::from("reports").join(&scenario.name));
        cva::run::write_reports(&out, &scenario, &dir)
            .with_context(|| format!("writing the reports to {}", dir.display()))?
    };
    let s = &out.summary;
    if args.json {
        println!("{}", serde_json::to_string(s)?);
    } else if show {
        println!("scenario        {}", s.scenario);
        println!(
            "CVA             {:.6}  (std error {:.6}, 95% CI [{:.6}, {:.6}])",
            s.cva, s.cva_std_error, s.cva_ci_low, s.cva_ci_high
        );
        println!(
            "value at t0     {:.6}  (std error {:.6}; {})",
            s.value_t0,
            s.value_t0_std_error,
            if s.value_t0_method == "nested" {
                "inner stage at t0 on every outer path"
            } else {
                "exp(-r t1) E[P(t1)] over the outer paths"
            }
        );
        println!(
            "paths           {} outer x {} inner{}, {} dates over {} years",
            s.outer_paths,
            s.inner_paths,
            if s.antithetic {
                " (antithetic pairs)"
            } else {
                ""
            },
            s.exposure_dates,
            s.horizon
        );
        println!(
            "regression      basis {}, {} precision, strategy {}",
            s.basis, s.precision, s.strategy
        );
        println!(
            "systems solved  {} (ldlt {}, householder-pcr {}, divide-conquer {}; failures {}, discarded eigenvalues {}, too few paths {})",
            s.systems_solved,
            s.solved_ldlt,
            s.solved_householder_pcr,
            s.solved_divide_conquer,
            s.solver_failures,
            s.discarded_eigenvalues,
            s.too_few_paths
        );
        println!(
            "wall time       {:.2} s on {} ({} threads): paths {:.2} s, regression build {:.2} s, solve {:.2} s, exposure {:.2} s",
            s.wall_seconds,
            s.backend,
            s.threads,
            s.paths_seconds,
            s.regression_build_seconds,
            s.solve_seconds,
            s.exposure_seconds
        );
        for p in &written {
            println!("report          {}", p.display());
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => run(args),
        Command::Bench(BenchCommand::Solvers(args)) => cva::bench::solvers(&args),
        Command::Bench(BenchCommand::Run(args)) => cva::bench::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if let Some(se) = e.downcast_ref::<ScenarioError>() {
                eprintln!("error: invalid scenario: {se}");
                return ExitCode::from(2);
            }
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
