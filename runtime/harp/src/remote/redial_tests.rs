//! A server a node could not reach when it joined is dialled again once something is routed
//! to it ([`PassedOver`]): here the placement names a server at an address where nothing
//! listens yet; the node passes it over; the server's node then comes up there, and the
//! next reroute to it reaches it, after which a read of a shard rerouted to it is answered
//! over the new link.

use super::*;
use crate::node::Routing;
use crate::remote::job_id;
use crate::remote::node_side::accept_peers;
use crate::remote::state_transfer::StateOutbox;
use crate::server::ServerActor;
use crate::table::{Init, TableSet, UpdateRule};
use harp_core::ShardMap;
use harp_core::{ParamKey, RowData, Version};
use harp_net::{JobCredentials, NetEndpoint, TransportConfig};
use harp_wire::ServerPlace;
use harp_wire::{NodeRole, WireCounters};

fn endpoint(creds: &JobCredentials, port: u16) -> NetEndpoint {
    let identity = creds.issue_node().unwrap();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    NetEndpoint::bind(addr, creds, &identity, TransportConfig::default()).unwrap()
}

/// A loopback port nothing listens on (the socket that found it is closed again).
fn free_port() -> u16 {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    socket.local_addr().unwrap().port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_passed_over_server_is_dialled_again_when_a_shard_is_routed_to_it() {
    let creds = JobCredentials::generate("redial").unwrap();
    let job = job_id(&creds);
    let node = endpoint(&creds, 0);
    let dialer = Dialer {
        me: 1,
        peers: StateDialer {
            endpoint: node.clone(),
            hello: harp_wire::hello(
                job,
                1,
                NodeRole {
                    worker: true,
                    server: true,
                    master: false,
                },
                String::new(),
            ),
            counters: Arc::new(WireCounters::new()),
            master_ip: std::net::Ipv4Addr::LOCALHOST.into(),
            lease_timeout_ms: 3_000,
        },
        master_addr: node.local_addr().unwrap(),
    };
    let mut tables = TableSet::new();
    let table = tables
        .dense_f32("w", 2, UpdateRule::Add, Init::Zeros)
        .unwrap();
    let tables = Arc::new(tables);
    let own = spawn(ServerActor, (ServerId(1), tables.clone()))
        .await
        .unwrap();
    let mut servers: ServerProxies = [(ServerId(1), own)].into_iter().collect();
    let store = ParamStore::new(
        tables.clone(),
        Routing {
            shard_map: ShardMap::round_robin(1, &[ServerId(1)]).unwrap(),
            servers: servers.clone(),
        },
    );
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let placement = Placement {
        epoch: 2,
        num_shards: 1,
        shards: Vec::new(),
        servers: vec![ServerPlace {
            server: 7,
            node_id: 7,
            listen_addr: addr.clone(),
        }],
    };
    let (_master, queue) = mpsc::unbounded_channel();
    let mut passed_over = PassedOver::default();
    let placed = Orders {
        in_hand: 1,
        queue: &queue,
    };
    reach_new_servers(
        &placement,
        (&store, &mut servers, &dialer),
        (&mut passed_over, &placed),
    )
    .await;
    assert!(
        !servers.contains_key(&ServerId(7)),
        "nothing listened there"
    );
    assert_eq!(passed_over.due(ServerId(7), 2), Some(addr.as_str()));

    // Server 7's node comes up at that address.
    let peer = endpoint(&creds, port);
    let seven = spawn(ServerActor, (ServerId(7), tables.clone()))
        .await
        .unwrap();
    accept_peers(
        &peer,
        Some(seven.clone()),
        Arc::new(StateOutbox::default()),
        Arc::new(WireCounters::new()),
        job,
    );
    // What the node does on `Reroute { server: 7 }`, its next order, before it reroutes.
    let rerouted = Orders {
        in_hand: 2,
        queue: &queue,
    };
    passed_over
        .reach_again(ServerId(7), (&store, &mut servers, &dialer), &rerouted)
        .await;
    assert!(servers.contains_key(&ServerId(7)), "dialled again");
    assert!(passed_over.0.is_empty());

    // The shard lives on server 7 now (set there directly); a read through the node's
    // store goes over the new link and sees it.
    let key = ParamKey::new(table.id(), 0);
    let (reply, done) = tokio::sync::oneshot::channel();
    seven
        .send_message(ServerMsg::Reset {
            rows: vec![(key, Some(Arc::new(RowData::F32(vec![3.0, 4.0]))))],
            reply,
        })
        .unwrap();
    done.await.unwrap().unwrap();
    store.reroute(ShardId(0), ServerId(7)).unwrap();
    let rows = store.read(&[key], Version(0)).await.unwrap();
    assert_eq!(*rows[0], RowData::F32(vec![3.0, 4.0]));

    // A server that left is not dialled again.
    passed_over.pass_over(ServerId(9), "127.0.0.1:1", &rerouted);
    passed_over.forget(ServerId(9));
    assert!(passed_over.0.is_empty());
}

/// The orders that came while a dial of a passed-over server failed (a lost server's
/// shards rerouted to it, an order each, sent before the master could know) do not dial it
/// again, each for a dial's deadline; the first order after them does.
#[test]
fn orders_that_came_while_a_dial_failed_do_not_dial_the_same_server_again() {
    let (master, queue) = mpsc::unbounded_channel();
    for _ in 0..3 {
        let reroute = Message::Reroute {
            shard: 0,
            server: 7,
        };
        master.send(Ok(reroute)).unwrap();
    }
    let mut passed_over = PassedOver::default();
    // Order 4 dialled server 7 and failed; orders 5 to 7 came meanwhile.
    let failed_at = Orders {
        in_hand: 4,
        queue: &queue,
    };
    passed_over.pass_over(ServerId(7), "127.0.0.1:1", &failed_at);
    for order in 5..=7 {
        assert_eq!(passed_over.due(ServerId(7), order), None, "order {order}");
    }
    assert_eq!(passed_over.due(ServerId(7), 8), Some("127.0.0.1:1"));
    assert_eq!(passed_over.due(ServerId(8), 8), None, "never passed over");
}
