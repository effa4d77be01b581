//! Arbitrary bytes through parse + the whole pipeline, with a secret set and
//! a supported-kinds list, so every step is reachable. Panics, overflows and
//! leaked secrets are failures.
#![no_main]

use libfuzzer_sys::fuzz_target;
use openwop_protocol::events::EventFactory;
use openwop_protocol::pipeline::{Context, DedupStore, HostPolicy, accept_bytes};
use openwop_protocol::redact::Redactor;

const SECRET: &str = "sk-FUZZ-SECRET-0001";

fuzz_target!(|data: &[u8]| {
    let host = HostPolicy { supported_envelopes: Some(vec!["vendor.fuzz.kind".into()]), ..HostPolicy::default() };
    let redactor = Redactor::new([("fuzz".to_owned(), SECRET.to_owned())]);
    let ctx = Context::new(&host, &redactor, "node-1", "2026-05-18T10:00:00Z");
    let mut store = DedupStore::new();
    let mut events = EventFactory::new("run-fuzz", 0);
    for _ in 0..2 {
        let p = accept_bytes(data, &ctx, &mut store, &mut events);
        let out = format!("{}{}", debug_text(&p.outcome), debug_text(&p.events));
        assert!(!out.contains(SECRET), "secret leaked");
    }
});

fn debug_text<T: std::fmt::Debug>(v: &T) -> String {
    format!("{v:?}")
}
