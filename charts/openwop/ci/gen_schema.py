#!/usr/bin/env python3
"""Writes charts/openwop/values.schema.json. The schema is written here as Python so that
shared shapes (images, resources, non-negative ints) are defined once; check.sh fails when
the committed file differs from this script's output."""
import json
import pathlib
import sys

def obj(props, required=None, extra=False, desc=None):
    s = {"type": "object", "additionalProperties": extra, "properties": props}
    if required:
        s["required"] = required
    if desc:
        s["description"] = desc
    return s

STR = {"type": "string"}
BOOL = {"type": "boolean"}
ANY_OBJ = {"type": "object"}
ANY_LIST = {"type": "array"}
STR_MAP = {"type": "object", "additionalProperties": {"type": "string"}}

def int_range(lo=0, hi=None):
    s = {"type": "integer", "minimum": lo}
    if hi is not None:
        s["maximum"] = hi
    return s

def nullable(s):
    return {"oneOf": [{"type": "null"}, s]}

PORT = int_range(1, 65535)
URL_OR_EMPTY = {"type": "string", "pattern": "^(https?://.+)?$"}
QUANTITY = {"type": ["string", "integer", "number"]}
RESOURCES = obj({
    "requests": {"type": "object", "additionalProperties": QUANTITY},
    "limits": {"type": "object", "additionalProperties": QUANTITY},
    "claims": ANY_LIST,
})
PULL = {"enum": ["Always", "IfNotPresent", "Never"]}
IMAGE = obj({"repository": {"type": "string", "minLength": 1}, "tag": STR, "pullPolicy": PULL},
            required=["repository"])
SIZE = {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?([KMGT]i?B?|[kmgt]i?b?)?$"}

schema = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "openwop chart values",
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "global": ANY_OBJ,
        "nameOverride": STR,
        "fullnameOverride": STR,
        "commonLabels": STR_MAP,
        "imagePullSecrets": {"type": "array", "items": obj({"name": STR}, required=["name"])},
        "operator": obj({
            "image": IMAGE,
            "replicas": int_range(1),
            "shutdownDrainSeconds": int_range(0, 25),
            "updateStrategy": obj({
                "type": {"type": "string", "enum": ["RollingUpdate", "Recreate"]},
                "rollingUpdate": ANY_OBJ,
            }),
            "resources": RESOURCES,
            "logLevel": STR,
            "extraEnv": {"type": "array", "items": {"type": "object", "required": ["name"]}},
            "podAnnotations": STR_MAP,
            "podLabels": STR_MAP,
            "nodeSelector": STR_MAP,
            "tolerations": ANY_LIST,
            "affinity": ANY_OBJ,
            "topologySpreadConstraints": ANY_LIST,
            "priorityClassName": STR,
            "port": PORT,
            "serviceAccount": obj({"create": BOOL, "name": STR, "annotations": STR_MAP}),
            "service": obj({"type": {"enum": ["ClusterIP", "NodePort", "LoadBalancer"]},
                            "port": PORT, "annotations": STR_MAP}),
            "watchNamespace": STR,
            "instanceId": {"type": "string", "maxLength": 63,
                           "pattern": "^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$"},
            "liveStatus": obj({
                "enabled": BOOL,
                "consumer": {"type": "string", "pattern": "^[A-Za-z0-9_-]+$"},
                "flushIntervalMs": int_range(10, 10000),
            }),
            "leaderElection": obj({
                "enabled": BOOL,
                "leaseName": {"type": "string", "minLength": 1, "maxLength": 253},
                "leaseDurationSeconds": int_range(2),
                "renewDeadlineSeconds": int_range(2),
                "renewIntervalSeconds": int_range(1),
            }),
        }),
        "worker": obj({
            "image": IMAGE,
            "serviceAccount": obj({"create": BOOL,
                                   "name": {"type": "string", "minLength": 1, "maxLength": 253}}),
            "namespaces": {"type": "array", "uniqueItems": True,
                           "items": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
                                     "maxLength": 63}},
            "resources": RESOURCES,
            "runAsUser": int_range(1),
            "otlpEndpoint": URL_OR_EMPTY,
        }),
        "limits": obj({
            "clarificationRounds": int_range(),
            "schemaRounds": int_range(),
            "envelopesPerTurn": int_range(),
            "maxNodeExecutions": nullable(int_range()),
            "maxRunDurationMs": nullable(int_range()),
            "maxProviderResponseBytes": int_range(1024),
            "maxHttpResponseBytes": int_range(1024, 524288),
        }),
        "egress": obj({
            "allowHosts": {"type": "array", "items": {"type": "string", "minLength": 1}},
        }),
        "providers": {"type": "array", "items": obj({
            "name": {"type": "string", "minLength": 1},
            "vendor": {"enum": ["openai", "anthropic", "gemini", "openai-compatible", "mock"]},
            "baseUrl": {"type": "string", "pattern": "^https?://"},
        }, required=["name", "vendor"])},
        "reliability": obj({
            "supported": BOOL,
            "maxRetryAttempts": int_range(1, 16),
            "distinguishesTruncation": BOOL,
            "truncationBudgetMultiplier": {"type": "number", "minimum": 1, "maximum": 8},
        }),
        "reasoning": obj({"supported": BOOL,
                          "promptDirective": {"enum": ["mandatory", "advisory", "off"]}}),
        "envelopeStrictness": {"enum": ["warn", "strict"]},
        "tierOneSubsetCompliance": {"enum": ["strict", "warn", "off"]},
        "conformance": obj({
            "mockAgentNamespaces": {"type": "array", "items": {"type": "string", "minLength": 1}},
            "providerMockNamespaces": {"type": "array", "items": {
                "type": "string", "pattern": "^(\\*|[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?|[a-z0-9][-a-z0-9]{0,61}\\*)$"}},
            "seams": obj({"enabled": {"type": "boolean"}, "spanIngestUrl": URL_OR_EMPTY}),
        }),
        "nodeTypes": {"type": "array", "items": obj({
            "typeId": {"type": "string", "minLength": 1},
            "configSchema": {"type": ["object", "boolean"]},
        }, required=["typeId"])},
        "fixtures": {"type": "array", "items": STR},
        "runs": obj({
            "maxConcurrentPerNamespace": int_range(1),
            "reconcileConcurrency": int_range(1, 512),
            "nodeConcurrency": int_range(1, 64),
            "durableWaitThresholdMs": int_range(),
            "maxSubWorkflowDepth": int_range(1),
            "maxWorkerRetries": int_range(),
            "backoffBaseSeconds": int_range(1),
            "backoffMaxSeconds": int_range(1),
            "podTtlSecondsAfterFinished": int_range(),
            "runTtlSecondsAfterFinished": nullable(int_range()),
        }),
        "rest": obj({
            "enabled": BOOL,
            "reviewCacheSeconds": int_range(0, 300),
            "maxBodyBytes": int_range(1024),
            "maxInFlight": int_range(1),
            "keepaliveSeconds": int_range(1, 30),
            "interruptRecordWaitSeconds": int_range(0, 60),
            "interruptTokens": obj({"lifetimeSeconds": int_range(60, 86400)}),
            "idempotency": obj({"retentionSeconds": int_range(86400)}),
        }),
        "ui": obj({"enabled": BOOL, "sessionSeconds": int_range(60, 86400)}),
        "webhooks": obj({
            "enabled": BOOL,
            "signingKey": obj({"existingSecret": STR}),
            "allowHosts": {"type": "array", "items": {"type": "string", "minLength": 1}},
            "caBundle": STR,
            "maxPerTenant": int_range(1),
            "maxAttempts": int_range(1, 20),
            "initialBackoffMs": int_range(1),
            "maxBackoffSeconds": int_range(1),
            "timeoutSeconds": int_range(1, 30),
            "breakerThreshold": int_range(1),
            "breakerOpenSeconds": int_range(1),
            "failureLimit": int_range(1),
            "failureWindowHours": int_range(1),
        }),
        "discovery": obj({"configMap": {"type": "string", "minLength": 1, "maxLength": 253},
                          "cacheControl": STR}),
        "nats": obj({
            "enabled": BOOL,
            "eventsStream": {"type": "string", "pattern": "^[A-Za-z0-9_-]+$"},
            # Whole seconds, or <n><unit> groups (s, m, h, d); 0 = keep until purged.
            "stream": obj({"maxAge": {"oneOf": [
                int_range(0, 100 * 365 * 86400),
                {"type": "string", "pattern": "^([0-9]+|([0-9]+[smhd])+)$"},
            ]}}),
            "image": IMAGE,
            "port": PORT,
            "monitorPort": PORT,
            "jetstream": obj({"maxMemory": SIZE, "maxFile": SIZE}),
            "maxPayload": SIZE,
            "persistence": obj({"enabled": BOOL, "storageClassName": STR, "size": QUANTITY,
                                "accessModes": {"type": "array", "minItems": 1, "items": STR}}),
            "resources": RESOURCES,
            "nodeSelector": STR_MAP,
            "tolerations": ANY_LIST,
            "affinity": ANY_OBJ,
            "external": obj({
                "url": {"type": "string", "pattern": "^$|^(nats|tls|ws|wss)://"},
                # A Secret name (DNS subdomain) or empty.
                "credentialsSecret": {"type": "string", "maxLength": 253,
                                      "pattern": "^$|^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"},
            }),
        }),
        "serviceMonitor": obj({"enabled": BOOL, "interval": STR, "scrapeTimeout": STR,
                               "labels": STR_MAP}),
        "podDisruptionBudget": obj({"enabled": BOOL,
                                    "maxUnavailable": {"type": ["integer", "string"]}}),
        "networkPolicy": obj({
            "enabled": BOOL, "natsClients": ANY_LIST, "operatorClients": ANY_LIST,
            "workerEgress": obj({
                "enabled": BOOL,
                "namespaces": {"type": "array", "items": {"type": "string", "minLength": 1}, "uniqueItems": True},
                "toolServers": {"type": "array", "items": obj({
                    "cidr": {"type": "string", "pattern": r"^[0-9a-fA-F.:]+/[0-9]{1,3}$"},
                    "ports": {"type": "array", "minItems": 1, "items": obj({
                        "port": PORT, "protocol": {"enum": ["TCP", "UDP", "SCTP"]}}, required=["port"])},
                }, required=["cidr", "ports"])},
                "toolServerPeers": ANY_LIST,
                "internet": BOOL,
            }),
        }),
    },
}

out = pathlib.Path(__file__).resolve().parent.parent / "values.schema.json"
text = json.dumps(schema, indent=2) + "\n"
if len(sys.argv) > 1 and sys.argv[1] == "--check":
    if out.read_text() != text:
        sys.exit(f"{out} is stale: run python3 {__file__}")
else:
    out.write_text(text)
