//! `harp node` asked to leave before it joined: it exits without joining, saying why.

use super::NodeTarget;
use crate::cli::{Cli, Command, RunApp};
use clap::Parser;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// A node whose stop signal comes while it loads its data (here: while `build` runs) ends
/// with an error that says so, and never dials the master (nothing listens at its address:
/// a dial would fail otherwise).
#[test]
fn a_node_asked_to_leave_while_it_loads_its_data_exits_without_joining() {
    let dir = tempfile::tempdir().unwrap();
    harp::JobCredentials::generate("counter")
        .unwrap()
        .save(dir.path())
        .unwrap();
    let cli = Cli::try_parse_from(["harp", "run", "counter", "--threads", "1"]).unwrap();
    let Command::Run {
        app: RunApp::Counter(args),
    } = cli.command
    else {
        panic!("not a counter run")
    };
    let target = NodeTarget {
        join: SocketAddr::from(([127, 0, 0, 1], 9)),
        credentials: dir.path().to_path_buf(),
        bind: IpAddr::V4(Ipv4Addr::LOCALHOST),
        roles: harp::NodeRoles::BOTH,
        cluster: args.cluster.clone(),
    };
    let runtime = target.cluster.runtime().unwrap();
    let (signal, asked) = tokio::sync::watch::channel(None);
    let build = || {
        signal.send(Some("SIGTERM")).unwrap();
        crate::cli::run_counter::build_app(&args)
    };
    let error = target
        .run_asked(&runtime, build, asked)
        .expect_err("the node must not run");
    assert_eq!(
        error.to_string(),
        "node: got SIGTERM while it loaded its data; it exits without joining the job"
    );
}
