//! The runtime side of RAP's cancellation as a command: tells every tool server given that the tool call `C` of
//! thread `T` was cancelled (`POST URL/cancel_tool_call` with `{"thread_id": T, "tool_call_id": C}` and
//! `Authorization: Bearer SECRET`), all at once and once each: nothing is ever retried.
//!
//! ```text
//! rap_cancel --token SECRET --thread T --call C [--timeout-ms MS] URL...
//! cargo run -p examples --bin rap_cancel -- --token s3cret --thread thread-1 --call toolu_01 http://127.0.0.1:4000
//! ```
//!
//! Each `URL` is a tool server's base URL (every argument that is neither a flag nor a flag's value). Once every
//! server has answered or timed out (`--timeout-ms`, default 2000, per server), it prints one line per server, in
//! the order given:
//!
//! ```text
//! http://127.0.0.1:4000 200 3 ms
//! http://127.0.0.1:4001 500 2 ms
//! http://127.0.0.1:4002 timeout 2001 ms
//! http://127.0.0.1:4003 error 1 ms: could not connect: ...
//! ```
//!
//! That is `URL OUTCOME ELAPSED ms`, then `: DETAIL` for an error. `URL` is as given; `OUTCOME` is the HTTP status
//! the server answered (its body is not read), `timeout` (no answer within `--timeout-ms`: the POST was
//! abandoned), or `error` (no answer for another reason, told by `DETAIL`); `ELAPSED` is the whole milliseconds
//! the POST took.
//!
//! It exits with 0 once every server has its line, whatever the outcomes (a cancel is advisory: the runtime has
//! moved on either way), and with 2 and a usage message on standard error when an argument is missing or unknown.
//! Logs go to standard error (`RUST_LOG`, default `info`: the notifier warns of every outcome but a 2xx).

use std::{process::ExitCode, time::Duration};

use tower_cancel_http::rap::{Delivery, Notifier, NotifyError};

const USAGE: &str = "usage: rap_cancel --token SECRET --thread T --call C [--timeout-ms MS] URL...";

/// The command line.
#[derive(Debug)]
struct Args {
    token: String,
    thread: String,
    call: String,
    timeout: Duration,
    urls: Vec<String>,
}

/// Read the arguments (without the program's name); an error is the message to print above the usage.
fn parse(args: impl IntoIterator<Item = String>) -> Result<Args, String> {
    let (mut token, mut thread, mut call, mut timeout_ms) = (None, None, None, None);
    let mut urls = Vec::new();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let slot = match arg.as_str() {
            "--token" => &mut token,
            "--thread" => &mut thread,
            "--call" => &mut call,
            "--timeout-ms" => &mut timeout_ms,
            flag if flag.starts_with('-') => return Err(format!("unknown flag {flag}")),
            _ => {
                urls.push(arg);
                continue;
            }
        };
        let value = args.next().ok_or_else(|| format!("{arg} takes a value"))?;
        if slot.replace(value).is_some() {
            return Err(format!("{arg} is given twice"));
        }
    }
    let timeout_ms = match timeout_ms {
        None => 2000,
        Some(ms) => match ms.parse::<u64>() {
            Ok(ms) if ms > 0 => ms,
            _ => {
                return Err(format!(
                    "--timeout-ms takes a number of milliseconds, not {ms:?}"
                ))
            }
        },
    };
    if urls.is_empty() {
        return Err("no tool server URL".into());
    }
    Ok(Args {
        token: token.ok_or("--token is missing")?,
        thread: thread.ok_or("--thread is missing")?,
        call: call.ok_or("--call is missing")?,
        timeout: Duration::from_millis(timeout_ms),
        urls,
    })
}

/// One server's line: `URL OUTCOME ELAPSED ms[: DETAIL]`.
fn line(url: &str, delivery: &Delivery) -> String {
    let ms = delivery.elapsed.as_millis();
    match &delivery.outcome {
        Ok(status) => format!("{url} {} {ms} ms", status.as_u16()),
        Err(NotifyError::TimedOut) => format!("{url} timeout {ms} ms"),
        Err(error) => format!("{url} error {ms} ms: {error}"),
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    if examples::flag("--help") || examples::flag("-h") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let args = match parse(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(problem) => {
            eprintln!("rap_cancel: {problem}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    examples::init_tracing();
    let notifier = Notifier::new(args.urls.iter().cloned())
        .bearer(&args.token)
        .timeout(args.timeout);
    let deliveries = notifier
        .cancel_tool_call(&args.thread, &args.call)
        .outcomes()
        .await;
    // The deliveries come in the order of the servers given.
    for (url, delivery) in args.urls.iter().zip(&deliveries) {
        println!("{}", line(url, delivery));
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Result<Args, String> {
        parse(line.split_whitespace().map(String::from))
    }

    #[test]
    fn urls_are_the_arguments_that_are_not_flags() {
        let parsed =
            args("http://a:1 --token s --thread t http://b:2 --call c --timeout-ms 50 http://c:3")
                .unwrap();
        assert_eq!(parsed.urls, ["http://a:1", "http://b:2", "http://c:3"]);
        assert_eq!(
            (
                parsed.token.as_str(),
                parsed.thread.as_str(),
                parsed.call.as_str()
            ),
            ("s", "t", "c")
        );
        assert_eq!(parsed.timeout, Duration::from_millis(50));
        assert_eq!(
            args("--token s --thread t --call c u").unwrap().timeout,
            Duration::from_secs(2)
        );
    }

    #[test]
    fn missing_or_unknown_arguments_are_refused() {
        for (line, problem) in [
            ("--thread t --call c u", "--token is missing"),
            ("--token s --call c u", "--thread is missing"),
            ("--token s --thread t u", "--call is missing"),
            ("--token s --thread t --call c", "no tool server URL"),
            (
                "--token s --thread t --call c u --timeout-ms",
                "--timeout-ms takes a value",
            ),
            (
                "--token s --thread t --call c u --timeout-ms x",
                "--timeout-ms takes a number",
            ),
            (
                "--token s --thread t --call c u --retries 3",
                "unknown flag --retries",
            ),
            (
                "--token s --token s2 --thread t --call c u",
                "--token is given twice",
            ),
        ] {
            let problem_seen = args(line).unwrap_err();
            assert!(problem_seen.starts_with(problem), "{line}: {problem_seen}");
        }
    }
}
