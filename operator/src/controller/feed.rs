//! One watch and one store per resource for the whole process ([`Feed`]): the REST API reads
//! the Runs and Workflows on every replica, and the leader's controllers need the same
//! objects. Two reflectors held two copies of every Run (the largest object the operator
//! caches), so the controllers subscribe to the REST API's watch instead of running their
//! own.
//!
//! kube's own shared streams (`store_shared`) were not used: they pass object references
//! only (no deletes, no watch errors, no relist markers) and a subscriber that joins late —
//! a follower that becomes leader — misses every object applied before it joined.

use std::fmt::Debug;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use futures::{Stream, StreamExt};
use kube::api::Api;
use kube::runtime::reflector::{self, Store, reflector};
use kube::runtime::{WatchStreamExt, watcher};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;

use super::caches::listed;
use super::triggers::slim;

/// How many events a subscriber may fall behind before the watch waits for it (the
/// controllers move each event into their queue at once).
const SUBSCRIBER_BUFFER: usize = 256;

type Subscriber<K> = mpsc::Sender<watcher::Result<watcher::Event<K>>>;

/// The objects of one watch: its store, and its events for whoever subscribes.
pub struct Feed<K: kube::Resource + 'static>
where
    K::DynamicType: Eq + Hash + Clone,
{
    store: Store<K>,
    subscribers: Arc<Mutex<Vec<Subscriber<K>>>>,
}

impl<K: kube::Resource + 'static> Clone for Feed<K>
where
    K::DynamicType: Eq + Hash + Clone,
{
    fn clone(&self) -> Self {
        Feed {
            store: self.store.clone(),
            subscribers: self.subscribers.clone(),
        }
    }
}

impl<K> Feed<K>
where
    K: kube::Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    /// The feed of `api`'s objects selected by `config`, stored without what no reader uses
    /// ([`slim`]), and the future that runs its watch (poll it for as long as the store and
    /// the subscribers are used). A failed list or watch is retried with backoff and handed
    /// to `on_error`; subscribers see only events.
    pub fn new(
        api: Api<K>,
        config: watcher::Config,
        on_error: impl Fn(&watcher::Error) + Send + 'static,
    ) -> (Self, impl Future<Output = ()> + Send + 'static) {
        let (store, writer) = reflector::store();
        let feed = Feed {
            store,
            subscribers: Arc::default(),
        };
        let events = reflector(writer, watcher(api, config).modify(slim)).default_backoff();
        let run = feed.clone().forward(events, on_error);
        (feed, run)
    }

    /// The one store of the watch's objects.
    pub fn store(&self) -> Store<K> {
        self.store.clone()
    }

    /// The watch's events from now on, after the store's objects (as `Apply`, once the store
    /// is ready): a subscriber that joins late still sees every object once. An object may
    /// come twice (in the store and as an event applied meanwhile); the newest copy comes
    /// last. The stream ends when the watch does.
    pub fn subscribe(
        &self,
    ) -> impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static {
        let (store, subscribers) = (self.store.clone(), self.subscribers.clone());
        futures::stream::once(async move {
            // Before the store is listed its objects are in the initial list still: waiting
            // for it means the first events this subscriber gets follow that list.
            let ready = listed(&store).await;
            let (tx, mut rx) = mpsc::channel(SUBSCRIBER_BUFFER);
            if ready {
                lock(&subscribers).push(tx);
            }
            // Subscribed first, listed second: an event applied in between comes twice
            // rather than never.
            let stored = if ready { store.state() } else { Vec::new() };
            let stored =
                futures::stream::iter(stored).map(|o| Ok(watcher::Event::Apply(K::clone(&o))));
            let live = futures::stream::poll_fn(move |cx| rx.poll_recv(cx));
            stored.chain(live)
        })
        .flatten()
    }

    /// Drives `events` (the reflector already stored each) and hands each to the
    /// subscribers; a subscriber that is gone is dropped.
    async fn forward(
        self,
        events: impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send,
        on_error: impl Fn(&watcher::Error) + Send,
    ) {
        let mut events = std::pin::pin!(events);
        while let Some(ev) = events.next().await {
            let ev = match ev {
                Ok(ev) => ev,
                Err(e) => {
                    on_error(&e);
                    continue;
                }
            };
            let subscribers = lock(&self.subscribers).clone();
            let mut gone = false;
            for tx in &subscribers {
                gone |= tx.send(Ok(ev.clone())).await.is_err();
            }
            if gone {
                lock(&self.subscribers).retain(|tx| !tx.is_closed());
            }
        }
        // The subscribers' streams end with the watch.
        lock(&self.subscribers).clear();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::ResourceExt;
    use kube::runtime::reflector::store::Writer;

    fn cm(name: &str, v: &str) -> ConfigMap {
        let mut c = ConfigMap::default();
        c.metadata.name = Some(name.into());
        c.metadata.namespace = Some("ns".into());
        c.data = Some([("v".to_owned(), v.to_owned())].into());
        c
    }

    /// A feed over a channel of events instead of a watch.
    fn feed() -> (
        Feed<ConfigMap>,
        mpsc::UnboundedSender<watcher::Event<ConfigMap>>,
        impl Future<Output = ()>,
    ) {
        let (store, writer): (Store<ConfigMap>, Writer<ConfigMap>) = reflector::store();
        let feed = Feed {
            store,
            subscribers: Arc::default(),
        };
        let (tx, mut rx) = mpsc::unbounded_channel();
        let events = reflector(
            writer,
            futures::stream::poll_fn(move |cx| rx.poll_recv(cx)).map(Ok),
        );
        let run = feed.clone().forward(events, |_| {});
        (feed, tx, run)
    }

    fn names(evs: &[watcher::Event<ConfigMap>]) -> Vec<String> {
        evs.iter()
            .map(|e| match e {
                watcher::Event::Apply(o) => {
                    format!("apply {}={}", o.name_any(), o.data.as_ref().unwrap()["v"])
                }
                watcher::Event::Delete(o) => format!("delete {}", o.name_any()),
                watcher::Event::InitApply(o) => format!("init {}", o.name_any()),
                watcher::Event::Init => "init".into(),
                watcher::Event::InitDone => "init done".into(),
            })
            .collect()
    }

    #[tokio::test]
    async fn one_store_and_a_late_subscriber_sees_every_object_then_the_live_events() {
        let (feed, tx, run) = feed();
        let run = tokio::spawn(run);
        tx.send(watcher::Event::Init).unwrap();
        tx.send(watcher::Event::InitApply(cm("a", "1"))).unwrap();
        tx.send(watcher::Event::InitDone).unwrap();
        assert!(listed(&feed.store()).await);
        let mut sub = Box::pin(feed.subscribe());
        let first = sub.next().await.unwrap().unwrap();
        assert_eq!(
            names(&[first]),
            ["apply a=1"],
            "joined late: the stored object"
        );
        tx.send(watcher::Event::Apply(cm("a", "2"))).unwrap();
        tx.send(watcher::Event::Delete(cm("a", "2"))).unwrap();
        let live = vec![
            sub.next().await.unwrap().unwrap(),
            sub.next().await.unwrap().unwrap(),
        ];
        assert_eq!(names(&live), ["apply a=2", "delete a"]);
        assert!(
            feed.store().state().is_empty(),
            "the subscriber reads the feed's one store"
        );
        drop(tx);
        assert!(sub.next().await.is_none(), "ends with the watch");
        run.await.unwrap();
    }

    #[tokio::test]
    async fn a_subscriber_before_the_initial_list_gets_the_list_once_listed() {
        let (feed, tx, run) = feed();
        let run = tokio::spawn(run);
        let mut sub = Box::pin(feed.subscribe());
        let next = tokio::spawn(async move { sub.next().await.map(|e| names(&[e.unwrap()])) });
        tx.send(watcher::Event::Init).unwrap();
        tx.send(watcher::Event::InitApply(cm("a", "1"))).unwrap();
        tx.send(watcher::Event::InitDone).unwrap();
        assert_eq!(next.await.unwrap().unwrap(), ["apply a=1"]);
        drop(tx);
        run.await.unwrap();
    }

    /// The operator started before its CRDs were served: the controllers' runners wait for
    /// the store (`Store::wait_until_ready`, one waker for all its waiters) while the
    /// subscribers wait for the first list. Every subscriber must still get it.
    #[tokio::test]
    async fn subscribers_waiting_beside_the_store_readers_get_the_first_list() {
        let (feed, tx, run) = feed();
        let run = tokio::spawn(run);
        let mut sub = Box::pin(feed.subscribe());
        let next = tokio::spawn(async move { sub.next().await.map(|e| names(&[e.unwrap()])) });
        tokio::task::yield_now().await;
        // A runner waiting for the same store after the subscriber began to wait.
        let store = feed.store();
        let runner = tokio::spawn(async move { store.wait_until_ready().await.is_ok() });
        tokio::task::yield_now().await;
        tx.send(watcher::Event::Init).unwrap();
        tx.send(watcher::Event::InitApply(cm("a", "1"))).unwrap();
        tx.send(watcher::Event::InitDone).unwrap();
        let first = tokio::time::timeout(std::time::Duration::from_secs(5), next)
            .await
            .expect("the subscriber was woken by the first list")
            .unwrap();
        assert_eq!(first.unwrap(), ["apply a=1"]);
        assert!(runner.await.unwrap());
        drop(tx);
        run.await.unwrap();
    }

    #[tokio::test]
    async fn a_dropped_subscriber_does_not_hold_the_watch() {
        let (feed, tx, run) = feed();
        let run = tokio::spawn(run);
        tx.send(watcher::Event::Init).unwrap();
        tx.send(watcher::Event::InitDone).unwrap();
        assert!(listed(&feed.store()).await);
        let mut sub = Box::pin(feed.subscribe());
        // Polled once: subscribed (the store is empty, so nothing comes yet).
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(50), sub.next())
                .await
                .is_err()
        );
        drop(sub);
        for i in 0..SUBSCRIBER_BUFFER * 2 {
            tx.send(watcher::Event::Apply(cm("a", &i.to_string())))
                .unwrap();
        }
        drop(tx);
        tokio::time::timeout(std::time::Duration::from_secs(5), run)
            .await
            .expect("the watch went on without the dropped subscriber")
            .unwrap();
        assert!(lock(&feed.subscribers).is_empty());
        assert_eq!(
            feed.store().state()[0].data.as_ref().unwrap()["v"],
            (SUBSCRIBER_BUFFER * 2 - 1).to_string()
        );
    }
}
