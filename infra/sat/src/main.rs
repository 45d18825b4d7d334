//! `sat`: parse the command line, run one command, print its answer, exit
//! with its status (0 done, 1 error, 2 usage, 3 findings).

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = sat::Cli::parse();
    match sat::run(cli).await {
        Ok((text, status)) => {
            let mut out = std::io::stdout().lock();
            if out.write_all(text.as_bytes()).and_then(|()| out.flush()).is_err() {
                return ExitCode::from(sat::error::EXIT_ERROR);
            }
            ExitCode::from(status)
        }
        Err(error) => {
            eprintln!("sat: {}", sat::render::terminal_safe(&shared::error_chain(&error)));
            ExitCode::from(sat::error::EXIT_ERROR)
        }
    }
}
