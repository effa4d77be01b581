//! The `webhooks` capability: absent unless the host delivers webhooks, then
//! `{supported: true, signatureAlgorithms: ["v1"]}` at the root and in the mirror, valid
//! against our schema, which refuses what the scheme list must not hold.

use openwop_protocol::capabilities::{CapabilitiesConfig, build};
use openwop_protocol::schema::{self, Document};
use serde_json::json;

#[test]
fn webhooks_are_advertised_only_when_delivered() {
    let off = build(&CapabilitiesConfig::default()).unwrap().to_value();
    assert!(off.get("webhooks").is_none(), "{off:#}");
    assert!(off["capabilities"].get("webhooks").is_none());

    let on = build(&CapabilitiesConfig {
        webhooks: true,
        ..CapabilitiesConfig::default()
    })
    .unwrap()
    .to_value();
    let want = json!({"supported": true, "signatureAlgorithms": ["v1"]});
    assert_eq!(on["webhooks"], want);
    assert_eq!(on["capabilities"]["webhooks"], want);
    schema::validate(Document::Capabilities, &on).unwrap();

    for bad in [
        json!({"signatureAlgorithms": ["v1"]}),
        json!({"supported": true, "signatureAlgorithms": []}),
        json!({"supported": true, "signatureAlgorithms": ["v0"]}),
        json!({"supported": true, "durable": true}),
    ] {
        let mut v = on.clone();
        v["webhooks"] = bad.clone();
        assert!(
            schema::validate(Document::Capabilities, &v).is_err(),
            "accepted webhooks = {bad}"
        );
    }
}
