//! Figure 10, what users feel: the latency of ordinary requests at a fixed rate while a storm of cancels runs on
//! the same connection (ours and every peer), and while another connection with many held requests closes (ours).
//!
//! - [`open_loop`]: the load, written at scheduled times by a thread of its own, the replies read by a task.
//! - [`under_storm`]: one run of table A, one target, with or without the storm.
//! - [`close`]: one run of table B, a connection closing beside another.
//! - [`tables`]: the rounds, their intervals, the tables and the bars of `storm.svg`.

pub mod close;
pub mod open_loop;
pub mod tables;
pub mod under_storm;
