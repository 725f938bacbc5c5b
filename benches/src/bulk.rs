//! `harp-bench transport-bulk`: delivering parameter rows to another process over loopback.
//!
//! One payload is a `DumpRows` of `--rows` rows × `--row-values` f32. Each round sends it
//! `--transfers` times, one after the other (send, wait for the peer's ack), through each of
//! three paths to three peer processes:
//! - harp: `Link::send_bulk`, decoded and validated by the peer's link, acked on the
//!   control stream ([`crate::via_harp`]);
//! - raw quinn: the same frame's bytes on a stream of their own, read to the end ([`crate::via_quinn`]);
//! - TCP: the same bytes over a loopback socket ([`crate::via_tcp`]).
//!
//! The order of the three rotates from round to round. Reported: MB/s (10^6 bytes of frame
//! per second) of each path in every round, their medians, and the median of the rounds'
//! harp/quinn ratios (`ratio_harp_vs_quinn`, target ≥ 0.8); TCP is reported beside it.

use crate::measure::median;
use crate::peer::{runtime, JobDir, PeerMode, PeerProcess};
use crate::via_harp::{dump_rows, HarpClient};
use crate::via_quinn::QuinnBulkClient;
use crate::via_tcp::TcpClient;
use crate::{emit, round_to, rounded, Args};
use anyhow::Result;
use harp_wire::{FrameLimits, FRAME_BYTES_MAX};
use serde_json::json;
use std::time::Instant;

pub fn run(args: &Args) -> Result<()> {
    let job = JobDir::create("bench-bulk")?;
    let mut dump = dump_rows(args.rows, args.row_values);
    let frame = harp_wire::encode_with(&dump, &FrameLimits::new(usize::MAX))?;
    // harp's frames are at most 64 MiB by default: a larger payload raises the limit at
    // both ends.
    let frame_bytes_max = FRAME_BYTES_MAX.max(frame.len());
    let limits = FrameLimits::new(frame_bytes_max);
    let rt = runtime()?;
    let extra = ["--frame-bytes-max".to_string(), frame_bytes_max.to_string()];
    let harp_peer = PeerProcess::spawn(PeerMode::Harp, &job.dir, &extra)?;
    let quinn_peer = PeerProcess::spawn(PeerMode::QuinnBulk, &job.dir, &[])?;
    let tcp_peer = PeerProcess::spawn(PeerMode::Tcp, &job.dir, &[])?;
    let mut harp = rt.block_on(HarpClient::connect(&job.creds, harp_peer.addr, limits))?;
    let mut quinn = rt.block_on(QuinnBulkClient::connect(&job.creds, quinn_peer.addr))?;
    let mut tcp = TcpClient::connect(tcp_peer.addr)?;

    let transfers = args.transfers.max(1);
    let mut send = |path: usize, count: usize| -> Result<f64> {
        let start = Instant::now();
        match path {
            0 => rt.block_on(async {
                for _ in 0..count {
                    harp.bulk(&mut dump).await?;
                }
                anyhow::Ok(())
            })?,
            1 => rt.block_on(async {
                for _ in 0..count {
                    quinn.bulk(&frame).await?;
                }
                anyhow::Ok(())
            })?,
            _ => {
                for _ in 0..count {
                    tcp.bulk(&frame)?;
                }
            }
        }
        Ok(start.elapsed().as_secs_f64())
    };
    // Warm up every path (congestion windows, buffers, page faults) before measuring.
    for path in 0..3 {
        send(path, 1)?;
    }
    let megabytes = (frame.len() * transfers) as f64 / 1e6;
    let mut mb_s = [Vec::new(), Vec::new(), Vec::new()];
    let mut ratios = Vec::new();
    for round in 0..args.rounds.max(1) {
        let mut secs = [0.0; 3];
        for k in 0..3 {
            let path = (round + k) % 3;
            secs[path] = send(path, transfers)?;
        }
        for path in 0..3 {
            mb_s[path].push(megabytes / secs[path]);
        }
        ratios.push(secs[1] / secs[0]);
    }
    harp.close();
    quinn.close();
    drop(tcp);
    drop((harp_peer, quinn_peer, tcp_peer));

    let [harp_mb_s, quinn_mb_s, tcp_mb_s] = mb_s;
    let vs_tcp: Vec<f64> = harp_mb_s
        .iter()
        .zip(&tcp_mb_s)
        .map(|(h, t)| h / t)
        .collect();
    emit(json!({
        "bench": "transport-bulk",
        "rows": args.rows, "row_values": args.row_values, "frame_bytes": frame.len(),
        "transfers_per_round": transfers, "rounds": ratios.len(),
        "harp_mb_s": rounded(&harp_mb_s, 1), "quinn_mb_s": rounded(&quinn_mb_s, 1),
        "tcp_mb_s": rounded(&tcp_mb_s, 1),
        "harp_mb_s_median": round_to(median(&harp_mb_s), 1),
        "quinn_mb_s_median": round_to(median(&quinn_mb_s), 1),
        "tcp_mb_s_median": round_to(median(&tcp_mb_s), 1),
        "ratios_harp_vs_quinn": rounded(&ratios, 3),
        "ratio_harp_vs_quinn": round_to(median(&ratios), 3), "target_min": 0.8,
        "ratio_harp_vs_tcp": round_to(median(&vs_tcp), 3),
    }));
    Ok(())
}
