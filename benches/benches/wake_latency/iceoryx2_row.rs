//! The iceoryx2 row: the nearest shared-memory peer, used as its users wait for data while
//! asleep. A publish-subscribe service carries the 64-byte message; an event service of the
//! same name carries the wake: the producer sends the sample, then its Notifier notifies; the
//! consumer looks for a sample and, finding none, sleeps in its Listener's blocking wait.

use iceoryx2::node::Node;
use iceoryx2::port::listener::Listener;
use iceoryx2::port::notifier::Notifier;
use iceoryx2::port::publisher::Publisher;
use iceoryx2::port::subscriber::Subscriber;
use iceoryx2::prelude::{ipc, NodeBuilder, ServiceName};

/// The message: the producer's clock in its first 8 bytes.
pub type Msg = [u8; 64];

/// Samples a subscriber holds: a whole run's, so that a consumer that falls behind (a loaded
/// machine) loses none (with the default of 2 and safe overflow, the oldest is overwritten,
/// and the consumer would wait for it for ever).
const BUFFER: usize = 8192;

type PubSub = iceoryx2::service::port_factory::publish_subscribe::PortFactory<ipc::Service, Msg, ()>;

fn pubsub(node: &Node<ipc::Service>, service: &ServiceName) -> PubSub {
    node.service_builder(service)
        .publish_subscribe::<Msg>()
        .subscriber_max_buffer_size(BUFFER)
        .open_or_create()
        .expect("iceoryx2 publish-subscribe service")
}

fn open(name: &str) -> (Node<ipc::Service>, ServiceName) {
    let node = NodeBuilder::new().create::<ipc::Service>().expect("iceoryx2 node");
    let service: ServiceName = name.try_into().expect("iceoryx2 service name");
    (node, service)
}

/// The producer's end: a Publisher and a Notifier.
pub struct Producer {
    publisher: Publisher<ipc::Service, Msg, ()>,
    notifier: Notifier<ipc::Service>,
    _node: Node<ipc::Service>,
}

impl Producer {
    /// Creates (or opens) the two services called `name` and the producer's ports.
    pub fn new(name: &str) -> Producer {
        let (node, service) = open(name);
        let pubsub = pubsub(&node, &service);
        let event = node.service_builder(&service).event().open_or_create().expect("iceoryx2 event service");
        let publisher = pubsub.publisher_builder().create().expect("iceoryx2 publisher");
        let notifier = event.notifier_builder().create().expect("iceoryx2 notifier");
        Producer { publisher, notifier, _node: node }
    }

    /// Sends `msg` and wakes the listener.
    pub fn send(&self, msg: &Msg) {
        self.publisher.send_copy(*msg).expect("iceoryx2 send");
        self.notifier.notify().expect("iceoryx2 notify");
    }
}

/// The consumer's end: a Subscriber and a Listener.
pub struct Consumer {
    subscriber: Subscriber<ipc::Service, Msg, ()>,
    listener: Listener<ipc::Service>,
    _node: Node<ipc::Service>,
}

impl Consumer {
    /// Opens (or creates) the two services called `name` and the consumer's ports.
    pub fn new(name: &str) -> Consumer {
        let (node, service) = open(name);
        let pubsub = pubsub(&node, &service);
        let event = node.service_builder(&service).event().open_or_create().expect("iceoryx2 event service");
        let subscriber =
            pubsub.subscriber_builder().buffer_size(BUFFER).create().expect("iceoryx2 subscriber");
        let listener = event.listener_builder().create().expect("iceoryx2 listener");
        Consumer { subscriber, listener, _node: node }
    }

    /// The next message's first 8 bytes, and the clock when it was received; sleeps in the
    /// Listener while there is none.
    pub fn recv(&self) -> (u64, u64) {
        loop {
            if let Some(s) = self.subscriber.receive().expect("iceoryx2 receive") {
                let now = xtcq_testkit::monotonic_ns();
                return (now, u64::from_le_bytes(s[..8].try_into().expect("8 bytes")));
            }
            self.listener.blocking_wait(|_| {}).expect("iceoryx2 blocking_wait");
        }
    }
}
