//! Nodes that offer only a worker or only a server (`harp node --role`): the master places
//! executors on worker nodes and shards on server nodes, the job is exact, and a set of
//! nodes without a worker (or without a server) is refused with a clear error.

use harp::{ClusterOptions, JobCredentials, NodeRoles};
use harp_apps::counter::{CounterApp, CounterConfig};
use harp_tests::{run_across_in_process, runtime, Threads};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

/// Runs a counter job across `roles.len()` nodes (in this process, over QUIC on loopback).
fn run_with_roles(roles: &[NodeRoles]) -> Result<harp::JobOutcome<CounterApp>, harp::HarpError> {
    let app = Arc::new(
        CounterApp::new(CounterConfig {
            tasks: 20_000,
            ..CounterConfig::default()
        })
        .unwrap(),
    );
    let options = ClusterOptions {
        nodes: roles.len() as u32,
        executors_per_worker: 4,
        collect_params: true,
        join_timeout_ms: 10_000,
        ..ClusterOptions::default()
    };
    run_across_in_process(&app, options, roles)
}

#[test]
fn worker_only_and_server_only_nodes_run_an_exact_job() {
    let roles = [
        NodeRoles::WORKER,
        NodeRoles::SERVER,
        NodeRoles::WORKER,
        NodeRoles::SERVER,
    ];
    let outcome = run_with_roles(&roles).expect("the job runs");
    let params = outcome.params.expect("parameters collected");
    let app = CounterApp::new(CounterConfig {
        tasks: 20_000,
        ..CounterConfig::default()
    })
    .unwrap();
    app.verify(&outcome.driver, &params)
        .unwrap_or_else(|diff| panic!("not exact:\n{diff}"));
    assert_eq!(outcome.driver.completed(), 20_000);
}

#[test]
fn nodes_without_a_server_are_refused_clearly() {
    let Err(err) = run_with_roles(&[NodeRoles::WORKER, NodeRoles::WORKER]) else {
        panic!("a job without servers ran");
    };
    assert!(err.to_string().contains("2 workers and 0 servers"), "{err}");
}

#[test]
fn a_node_offering_nothing_is_refused() {
    let app = Arc::new(CounterApp::new(CounterConfig::default()).unwrap());
    let creds = JobCredentials::generate("nothing").unwrap();
    let err = runtime(Threads::Current)
        .block_on(harp::run_node_with(
            app,
            &creds,
            "127.0.0.1:9".parse().unwrap(),
            IpAddr::V4(Ipv4Addr::LOCALHOST),
            NodeRoles::NONE,
            |_| {},
        ))
        .unwrap_err();
    assert!(
        err.to_string().contains("worker, a server or both"),
        "{err}"
    );
}
