//! A `Connection` closed on one thread while a request registers on another: the request is either in the table
//! when the close cancels what the table holds, or sees the close as it registers and starts out cancelled. It is
//! never left running on a closed connection (a transport that closes from another task than the one that reads,
//! as HTTP and WebSocket adapters do).

use std::{
    future::Future,
    hint::spin_loop,
    pin::pin,
    sync::{
        atomic::{AtomicUsize, Ordering::SeqCst},
        Arc, Mutex,
    },
    task::Context,
};

use futures_util::task::noop_waker_ref;
use tower::{service_fn, Layer, Service};
use tower_cancel::{
    dialect::Lsp, BoxError, CancelLayer, CancelReason, Connection, Incoming, Message, Outbox,
    Request, Scope,
};

/// Spin for a number of steps that varies with `round`, so that the two threads meet at every offset.
fn stagger(round: usize, prime: usize) {
    for _ in 0..(round * prime % 64) {
        spin_loop();
    }
}

#[test]
fn a_request_registered_while_its_connection_closes_never_runs_on() {
    let rounds = 50_000;
    // The two threads step through the rounds in lockstep: `go` starts round i on the closer, `done` ends it.
    let go = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let current: Arc<Mutex<Option<Connection>>> = Arc::default();
    let closer = {
        let (go, done, current) = (go.clone(), done.clone(), current.clone());
        std::thread::spawn(move || {
            for round in 1..=rounds {
                while go.load(SeqCst) != round {
                    spin_loop();
                }
                let connection = current.lock().unwrap().clone().expect("set for the round");
                stagger(round, 7919);
                connection.close(CancelReason::Disconnect);
                done.store(round, SeqCst);
            }
        })
    };
    let mut escaped = 0;
    for round in 1..=rounds {
        let connection = Scope::new().connect(Outbox::closed());
        let mut service = CancelLayer::new(Lsp).layer(service_fn(|_: Request| {
            std::future::pending::<Result<serde_json::Value, BoxError>>()
        }));
        let message = Message::from_slice(br#"{"jsonrpc":"2.0","id":1,"method":"hang"}"#).unwrap();
        let Incoming::Request(request) = connection.receive(message) else {
            unreachable!("a request")
        };
        *current.lock().unwrap() = Some(connection.clone());
        go.store(round, SeqCst);
        stagger(round, 104_729);
        let response = service.call(request);
        while done.load(SeqCst) != round {
            spin_loop();
        }
        let mut response = pin!(response);
        if response
            .as_mut()
            .poll(&mut Context::from_waker(noop_waker_ref()))
            .is_pending()
        {
            escaped += 1;
        }
    }
    closer.join().unwrap();
    assert_eq!(
        escaped, 0,
        "{escaped} of {rounds} requests registered while their connection closed kept running"
    );
}
