//! A RAP tool server at `http://ADDR`: the runtime discovers its tools at `GET /.well-known/rap-toolset`, invokes
//! them with `POST /invoke` (acknowledged at once; the `tool_result` is POSTed to the invocation's
//! `callback_url` later), and stops them with `POST /cancel_tool_call` or `POST /close_thread`. A call the runtime
//! cancelled is stopped and gets no result.
//!
//! ```text
//! cargo run -p examples --bin rap_tool_server -- --addr 127.0.0.1:8080 --token s3cret
//! cargo run -p examples --bin rap_tool_server -- --addr 127.0.0.1:0 --token s3cret --timeout-ms 5000
//! cargo run -p examples --bin rap_tool_server -- --addr 127.0.0.1:8080 --token s3cret --allow-private-callbacks
//! ```
//!
//! Once bound it prints one line, `listening on http://ADDR` (with the real port when asked for port 0): the base
//! URL a runtime is given. Every endpoint but discovery wants `Authorization: Bearer TOKEN` (401 without it);
//! `--token` is required. Tools ([`examples::rap`]): `sleep {"ms"}` answers the text `slept N ms`; `stats` answers
//! the JSON text `{"started","completed","cancelled","inFlight"}` (the sleep handlers' counters, and the calls
//! running besides the `stats` call itself). With `--timeout-ms T` a call that runs too long is stopped and its
//! result is `Error: the tool call timed out`.
//!
//! Callback URLs on loopback, private and link-local addresses (`127.0.0.1`, `[::1]`, `10.x`, `169.254.169.254`,
//! `localhost`...) are refused: the invocation gets 400 `callback_url: an internal address ...`, and a host name
//! is delivered to on its public addresses only. `--allow-private-callbacks` delivers to them too, for a runtime
//! on the same host or network (and for tests on loopback).
//!
//! Served by [`tower_cancel_http::serve()`] with its default bounds against hostile clients: a request's head and its body
//! within 30 s each, idle connections closed, at most 1024 connections open (the one idle the longest closed to
//! make room, 503 when every one is busy).

use std::process::ExitCode;

#[tokio::main]
async fn main() -> std::io::Result<ExitCode> {
    examples::init_tracing();
    let addr = examples::string_arg("--addr").unwrap_or_else(|| "127.0.0.1:0".into());
    let Some(token) = examples::string_arg("--token") else {
        // Serving without authentication would let anyone cancel anyone's calls.
        eprintln!("rap_tool_server: --token TOKEN is required");
        return Ok(ExitCode::from(2));
    };
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    let base = format!("http://{}", listener.local_addr()?);
    let server = examples::rap::Server::with_options(
        &base,
        examples::rap::Options {
            timeouts: examples::timeouts_from_args(),
            allow_private_callbacks: examples::flag("--allow-private-callbacks"),
            ..Default::default()
        },
    );
    let app = server.router(&token);
    println!("listening on {base}");
    // `serve` gives each request the peer's address: the rate limit of cancels is each client's (its token and
    // its address).
    tower_cancel_http::serve(listener, app).await?;
    Ok(ExitCode::SUCCESS)
}
