//! `harp-bench transport-rtt`: the round trip of a small parameter read between two
//! processes over loopback.
//!
//! harp: `Link::send(&Message::Get { .. })` answered by the peer with `Message::Rows` (one
//! row of `--reply-values` f32) on the control stream ([`crate::via_harp`]). Reference: raw
//! quinn request/response on one bidirectional stream carrying the same bytes, length-prefixed
//! ([`crate::via_quinn`]). Requests go one at a time. Each round measures `--requests`
//! requests on each path (the order alternates), after a warm-up; reported are every
//! round's p50 and p99 latency in µs, their medians, and the medians of the rounds'
//! harp/quinn ratios (`ratio_p50`, `ratio_p99`).

use crate::measure::median;
use crate::peer::{runtime, JobDir, PeerMode, PeerProcess};
use crate::via_harp::{get_request, rows_reply, HarpClient};
use crate::via_quinn::QuinnRttClient;
use crate::{emit, round_to, rounded, Args};
use anyhow::Result;
use harp_wire::FrameLimits;
use serde_json::json;
use std::time::Instant;

/// The `q` quantile (nearest rank) of `xs`, sorted in place.
fn quantile(xs: &mut [f64], q: f64) -> f64 {
    xs.sort_by(f64::total_cmp);
    let rank = ((q * xs.len() as f64).ceil() as usize).max(1);
    xs.get(rank - 1).copied().unwrap_or(0.0)
}

pub fn run(args: &Args) -> Result<()> {
    let job = JobDir::create("bench-rtt")?;
    let request = harp_wire::encode(&get_request(1))?;
    let reply_bytes = harp_wire::encode(&rows_reply(1, args.reply_values))?.len();
    let rt = runtime()?;
    let extra = ["--reply-values".to_string(), args.reply_values.to_string()];
    let harp_peer = PeerProcess::spawn(PeerMode::Harp, &job.dir, &extra)?;
    let quinn_peer = PeerProcess::spawn(PeerMode::QuinnRtt, &job.dir, &extra)?;
    let mut harp = rt.block_on(HarpClient::connect(
        &job.creds,
        harp_peer.addr,
        FrameLimits::default(),
    ))?;
    let mut quinn = rt.block_on(QuinnRttClient::connect(
        &job.creds,
        quinn_peer.addr,
        request.to_vec(),
    ))?;

    // Latencies in µs of `count` requests, one at a time, on path 0 (harp) or 1 (quinn).
    let mut measure = |path: usize, count: usize| -> Result<Vec<f64>> {
        rt.block_on(async {
            let mut micros = Vec::with_capacity(count);
            for _ in 0..count {
                let start = Instant::now();
                if path == 0 {
                    harp.get().await?;
                } else {
                    quinn.request().await?;
                }
                micros.push(start.elapsed().as_secs_f64() * 1e6);
            }
            Ok(micros)
        })
    };
    let requests = args.requests.max(1);
    let warmup = (requests / 10).max(100);
    measure(0, warmup)?;
    measure(1, warmup)?;
    // [path][round]
    let (mut p50, mut p99) = ([Vec::new(), Vec::new()], [Vec::new(), Vec::new()]);
    for round in 0..args.rounds.max(1) {
        for k in 0..2 {
            let path = (round + k) % 2;
            let mut micros = measure(path, requests)?;
            p50[path].push(quantile(&mut micros, 0.50));
            p99[path].push(quantile(&mut micros, 0.99));
        }
    }
    harp.close();
    quinn.close();
    drop((harp_peer, quinn_peer));

    let ratios =
        |xs: &[Vec<f64>; 2]| -> Vec<f64> { xs[0].iter().zip(&xs[1]).map(|(h, q)| h / q).collect() };
    let (ratios_p50, ratios_p99) = (ratios(&p50), ratios(&p99));
    emit(json!({
        "bench": "transport-rtt",
        "requests_per_round": requests, "rounds": ratios_p50.len(),
        "request_bytes": request.len(), "reply_bytes": reply_bytes,
        "reply_values": args.reply_values,
        "harp_p50_us": rounded(&p50[0], 1), "harp_p99_us": rounded(&p99[0], 1),
        "quinn_p50_us": rounded(&p50[1], 1), "quinn_p99_us": rounded(&p99[1], 1),
        "harp_p50_us_median": round_to(median(&p50[0]), 1),
        "harp_p99_us_median": round_to(median(&p99[0]), 1),
        "quinn_p50_us_median": round_to(median(&p50[1]), 1),
        "quinn_p99_us_median": round_to(median(&p99[1]), 1),
        "ratios_p50": rounded(&ratios_p50, 3), "ratios_p99": rounded(&ratios_p99, 3),
        "ratio_p50": round_to(median(&ratios_p50), 3),
        "ratio_p99": round_to(median(&ratios_p99), 3),
    }));
    Ok(())
}
