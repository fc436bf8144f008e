//! Throughput and added latency through the bridge, beside the same client publishing to and
//! fetching from JetStream directly, and beside xtcq on one host. Ignored by default; run
//! (release build, a quiet machine) with
//!
//! ```sh
//! cargo build --release -p xtcq-cli -p xtcq-bridge
//! cargo test --release -p xtcq-tests --test bridge -- --ignored --nocapture bench::
//! ```
//!
//! `XTCQ_BRIDGE_BENCH_JOBS` (20,000) jobs of 16 bytes; `XTCQ_BRIDGE_BENCH_PINGS` (200) single
//! jobs, one at a time, for the latency.

use xtcq_testkit::bridge::*;
use xtcq_testkit::*;

use std::time::{Duration, Instant};

use async_nats::jetstream;
use futures_util::StreamExt;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn rate(n: usize, d: Duration) -> String {
    format!("{:.0} jobs/s", n as f64 / d.as_secs_f64())
}

fn percentiles(mut v: Vec<Duration>) -> String {
    v.sort();
    let at = |q: f64| v[((v.len() - 1) as f64 * q) as usize];
    format!("p50 {:?}, p99 {:?}", at(0.5), at(0.99))
}

/// The bridge's own pattern, without xtcq: publish with a message id in rounds of 64, awaiting
/// the acks; then fetch in batches of 256 and ack each.
fn direct_jetstream(nats: &Nats, n: usize, pings: usize) -> (Duration, Duration, Vec<Duration>) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("rt");
    rt.block_on(async {
        let client = async_nats::connect(nats.url()).await.expect("connect");
        let js = jetstream::new(client);
        let cfg = jetstream::stream::Config {
            name: "DIRECT".into(),
            subjects: vec!["direct".into()],
            retention: jetstream::stream::RetentionPolicy::WorkQueue,
            duplicate_window: Duration::from_secs(600),
            ..Default::default()
        };
        let s = js.get_or_create_stream(cfg).await.expect("stream");
        let ccfg = jetstream::consumer::pull::Config {
            durable_name: Some("D".into()),
            ack_policy: jetstream::consumer::AckPolicy::Explicit,
            ..Default::default()
        };
        let c = s.get_or_create_consumer("D", ccfg).await.expect("consumer");
        let publish = |i: usize| {
            let js = js.clone();
            async move {
                let mut h = async_nats::HeaderMap::new();
                h.insert("Nats-Msg-Id", format!("d-{i}").as_str());
                js.publish_with_headers("direct", h, format!("job-{i:012}").into()).await.expect("publish")
            }
        };
        let t = Instant::now();
        for round in (0..n).collect::<Vec<_>>().chunks(64) {
            let mut acks = Vec::new();
            for &i in round {
                acks.push(publish(i).await);
            }
            for a in acks {
                a.await.expect("publish ack");
            }
        }
        let published = t.elapsed();
        let t = Instant::now();
        let mut got = 0;
        while got < n {
            let mut b =
                c.batch().max_messages(256).expires(Duration::from_secs(1)).messages().await.expect("fetch");
            while let Some(m) = b.next().await {
                m.expect("message").ack().await.expect("ack");
                got += 1;
            }
        }
        let fetched = t.elapsed();
        let mut lat = Vec::new();
        for i in 0..pings {
            let t = Instant::now();
            publish(n + i).await.await.expect("publish ack");
            let mut b =
                c.batch().max_messages(1).expires(Duration::from_secs(5)).messages().await.expect("fetch");
            b.next().await.expect("a message").expect("message").ack().await.expect("ack");
            lat.push(t.elapsed());
        }
        (published, fetched, lat)
    })
}

#[test]
#[ignore]
fn bench_bridge_vs_jetstream_vs_one_host() {
    let Some(nats) = Nats::start("bench_bridge_vs_jetstream_vs_one_host") else { return };
    let n = env_or("XTCQ_BRIDGE_BENCH_JOBS", 20_000);
    let pings = env_or("XTCQ_BRIDGE_BENCH_PINGS", 200);
    let inflight = env_or("XTCQ_BRIDGE_BENCH_INFLIGHT", 256).to_string();
    let (a, b) = (Host::start("A"), Host::start("B"));
    a.ok(&["create", "q"], b"");
    b.ok(&["create", "q", "--lease", "30s"], b"");
    a.ok(&["create", "local"], b"");

    // xtcq on one host: push, then steal and ack, through the client library.
    let ca = xtcq_client::Client::connect(Some(&a.socket())).expect("connect A");
    let owner = ca.attach_owner("local").expect("owner");
    let thief = ca.attach_thief("local").expect("thief");
    let t = Instant::now();
    let mut done = 0;
    for i in 0..n {
        let p = format!("job-{i:012}");
        while owner.push(p.as_bytes()).is_err() {
            while let Some(j) = thief.steal().expect("steal") {
                j.ack().expect("ack");
                done += 1;
            }
        }
    }
    while done < n {
        if let Some(j) = thief.steal().expect("steal") {
            j.ack().expect("ack");
            done += 1;
        }
    }
    let one_host = t.elapsed();

    let (published, fetched, direct_lat) = direct_jetstream(&nats, n, pings);

    // Through the bridge: push on A, out, JetStream, in, steal and ack on B in this process.
    let mut out = Bridge::start(&a, &nats, "out", "q", "JOBS", &[], &[]);
    let mut inb =
        Bridge::start(&b, &nats, "in", "q", "JOBS", &["--consumer", "B", "--max-inflight", &inflight], &[]);
    let cb = xtcq_client::Client::connect(Some(&b.socket())).expect("connect B");
    let worker = cb.attach_thief("q").expect("thief B");
    let producer = ca.attach_injector("q").expect("injector A");
    let t = Instant::now();
    let mut pushed = 0;
    let mut ran = 0;
    while ran < n {
        while pushed < n && producer.push(format!("job-{pushed:012}").as_bytes()).is_ok() {
            pushed += 1;
        }
        if let Some(j) = worker.steal_wait(Some(Duration::from_millis(10))).expect("steal") {
            j.ack().expect("ack");
            ran += 1;
        }
    }
    let run_on_b = t.elapsed();
    wait_until(Duration::from_secs(60), "every job acked upstream", || inb.stat("acked") == n as u64);
    let settled = t.elapsed();
    let mut lat = Vec::new();
    for i in 0..pings {
        let t = Instant::now();
        producer.push(format!("ping-{i}").as_bytes()).expect("push");
        let j = worker.steal_wait(Some(Duration::from_secs(10))).expect("steal").expect("a ping");
        lat.push(t.elapsed());
        j.ack().expect("ack");
    }
    println!("jobs: {n} of 16 bytes; one nats-server and two xtcqd on this machine");
    println!("xtcq, one host (push, steal, ack):            {}", rate(n, one_host));
    println!("JetStream direct, publish (acked, rounds of 64): {}", rate(n, published));
    println!("JetStream direct, fetch + ack (batches of 256):  {}", rate(n, fetched));
    println!("JetStream direct, publish then fetch (serial):   {}", rate(n, published + fetched));
    println!("bridge A -> B, pushed on A to run on B:       {}", rate(n, run_on_b));
    println!("bridge A -> B, to the last upstream ack:      {}", rate(n, settled));
    println!("latency, one job at a time, JetStream direct publish -> fetched: {}", percentiles(direct_lat));
    println!("latency, one job at a time, bridge push on A -> stolen on B:     {}", percentiles(lat));
    out.stop();
    inb.stop();
}
