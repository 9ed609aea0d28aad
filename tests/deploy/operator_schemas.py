"""Structural JSON schemas for the operator kinds the manifests use, for offline validation.

kubernetes-validate ships schemas for built-in kinds only. For cert-manager (``Issuer``,
``Certificate``, cert-manager.io/v1) and CloudNativePG (``Cluster``, postgresql.cnpg.io/v1) these
schemas list each spec field name those operators' CRDs define (so a misspelt field is caught),
the required fields, and the types and enums of the fields our manifests set. Field names were read
from cert-manager's and CloudNativePG's published CRDs (cert-manager.io_certificates.yaml,
cert-manager.io_issuers.yaml, postgresql.cnpg.io_clusters.yaml); they are a subset, not a copy.
"""

from __future__ import annotations

from typing import Any

Schema = dict[str, Any]

_STR: Schema = {"type": "string"}
_INT: Schema = {"type": "integer"}
_BOOL: Schema = {"type": "boolean"}
_OBJ: Schema = {"type": "object"}
_STR_LIST: Schema = {"type": "array", "items": _STR}
_QUANTITY: Schema = {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$"}
_DURATION: Schema = {"type": "string", "pattern": r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$"}
_LABELS: Schema = {"type": "object", "additionalProperties": _STR}


def _closed(properties: dict[str, Schema], *, required: tuple[str, ...] = ()) -> Schema:
    """An object schema that rejects any field not in ``properties``."""
    return {"type": "object", "properties": properties, "required": list(required), "additionalProperties": False}


def _open_fields(*names: str) -> dict[str, Schema]:
    """Fields that exist but whose inner structure is not checked here."""
    return {name: {} for name in names}


_ISSUER_REF = _closed({"name": _STR, "kind": {"enum": ["Issuer", "ClusterIssuer"]}, "group": _STR},
                      required=("name",))
_PRIVATE_KEY = _closed({
    "algorithm": {"enum": ["RSA", "ECDSA", "Ed25519"]},
    "encoding": {"enum": ["PKCS1", "PKCS8"]},
    "rotationPolicy": {"enum": ["Never", "Always"]},
    "size": _INT,
})
_USAGES = {"type": "array", "items": {"enum": [
    "signing", "digital signature", "content commitment", "key encipherment", "key agreement",
    "data encipherment", "cert sign", "crl sign", "encipher only", "decipher only", "any", "server auth",
    "client auth", "code signing", "email protection", "s/mime", "ipsec end system", "ipsec tunnel",
    "ipsec user", "timestamping", "ocsp signing", "microsoft sgc", "netscape sgc"]}}

CERTIFICATE_SPEC = _closed({
    "secretName": _STR, "issuerRef": _ISSUER_REF, "dnsNames": _STR_LIST, "ipAddresses": _STR_LIST,
    "uris": _STR_LIST, "emailAddresses": _STR_LIST, "commonName": _STR, "duration": _DURATION,
    "renewBefore": _DURATION, "renewBeforePercentage": _INT, "isCA": _BOOL, "privateKey": _PRIVATE_KEY,
    "usages": _USAGES, "revisionHistoryLimit": _INT, "encodeUsagesInRequest": _BOOL,
    **_open_fields("additionalOutputFormats", "keystores", "literalSubject", "nameConstraints", "otherNames",
                   "renewal", "secretTemplate", "signatureAlgorithm", "subject"),
}, required=("secretName", "issuerRef"))

ISSUER_SPEC: Schema = {
    **_closed({"selfSigned": _OBJ, "ca": _OBJ, "acme": _OBJ, "vault": _OBJ, "venafi": _OBJ}),
    "minProperties": 1, "maxProperties": 1,
}

_STORAGE = _closed({"size": _QUANTITY, "storageClass": _STR, "resizeInUseVolumes": _BOOL, "pvcTemplate": _OBJ})
_RESOURCES = _closed({"requests": {"type": "object", "additionalProperties": _QUANTITY},
                      "limits": {"type": "object", "additionalProperties": _QUANTITY}, "claims": {}})

CLUSTER_SPEC = _closed({
    "instances": {"type": "integer", "minimum": 1},
    "imageName": _STR,
    "primaryUpdateStrategy": {"enum": ["unsupervised", "supervised"]},
    "primaryUpdateMethod": {"enum": ["switchover", "restart"]},
    "inheritedMetadata": _closed({"labels": _LABELS, "annotations": _LABELS}),
    "bootstrap": _closed({
        "initdb": _closed({"database": _STR, "owner": _STR, **_open_fields(
            "builtinLocale", "dataChecksums", "encoding", "icuLocale", "icuRules", "import", "locale",
            "localeCType", "localeCollate", "localeProvider", "options", "postInitApplicationSQL",
            "postInitApplicationSQLRefs", "postInitSQL", "postInitSQLRefs", "postInitTemplateSQL",
            "postInitTemplateSQLRefs", "secret", "walSegmentSize")}),
        **_open_fields("pg_basebackup", "recovery")}),
    "postgresql": _closed({
        "synchronous": _closed({
            "method": {"enum": ["any", "first"]}, "number": {"type": "integer", "minimum": 1},
            "dataDurability": {"enum": ["required", "preferred"]},
            **_open_fields("failoverQuorum", "maxStandbyNamesFromCluster", "nodeFailureDomainKeys",
                           "podFailureDomainKeys", "standbyNamesPost", "standbyNamesPre")},
            required=("method", "number")),
        "parameters": _LABELS,
        **_open_fields("enableAlterSystem", "extensions", "ldap", "pg_hba", "pg_ident", "promotionTimeout",
                       "shared_preload_libraries", "syncReplicaElectionConstraint")}),
    "storage": _STORAGE,
    "walStorage": _STORAGE,
    "affinity": _closed({
        "enablePodAntiAffinity": _BOOL, "topologyKey": _STR,
        "podAntiAffinityType": {"enum": ["preferred", "required"]},
        **_open_fields("additionalPodAffinity", "additionalPodAntiAffinity", "nodeAffinity", "nodeSelector",
                       "tolerations")}),
    "resources": _RESOURCES,
    "minSyncReplicas": _INT,
    "maxSyncReplicas": _INT,
    **_open_fields(
        "backup", "certificates", "description", "enablePDB", "enableSuperuserAccess", "env", "envFrom",
        "ephemeralVolumeSource", "ephemeralVolumesSizeLimit", "externalClusters", "failoverDelay",
        "imageCatalogRef", "imagePullPolicy", "imagePullSecrets", "livenessProbeTimeout", "logLevel", "managed",
        "monitoring", "nodeMaintenanceWindow", "plugins", "podSecurityContext", "podSelectorRefs",
        "postgresGID", "postgresUID", "primaryLease", "priorityClassName", "probes", "projectedVolumeTemplate",
        "replica", "replicationSlots", "schedulerName", "seccompProfile", "securityContext",
        "serviceAccountName", "serviceAccountTemplate", "smartShutdownTimeout", "startDelay", "stopDelay",
        "superuserSecret", "switchoverDelay", "tablespaces", "topologySpreadConstraints"),
}, required=("instances",))

_METADATA = {"type": "object", "required": ["name"], "properties": {"name": _STR, "namespace": _STR}}

SCHEMAS: dict[tuple[str, str], Schema] = {
    (api_version, kind): _closed({"apiVersion": _STR, "kind": _STR, "metadata": _METADATA, "spec": spec},
                                 required=("apiVersion", "kind", "metadata", "spec"))
    for api_version, kind, spec in (
        ("cert-manager.io/v1", "Certificate", CERTIFICATE_SPEC),
        ("cert-manager.io/v1", "Issuer", ISSUER_SPEC),
        ("postgresql.cnpg.io/v1", "Cluster", CLUSTER_SPEC),
    )
}
"""(apiVersion, kind) -> JSON schema of the whole object."""
