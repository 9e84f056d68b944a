//! The cluster's PKI: a CA, the API server's serving certificate, an admin client certificate,
//! the service-account signing key, and the pair the kubelet API needs (the node agents' serving
//! certificate, the API server's client certificate towards them). Generated per cluster so no secret is ever shared.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// PEM-encoded certificates and keys for one cluster.
pub struct Pki {
    /// CA certificate; clients trust it and the API server verifies client certs with it.
    pub ca_cert: String,
    /// Serving certificate for 127.0.0.1, localhost and the in-cluster service names.
    pub serving_cert: String,
    /// Key of the serving certificate.
    pub serving_key: String,
    /// Client certificate for CN=admin, O=system:masters.
    pub admin_cert: String,
    /// Key of the admin certificate.
    pub admin_key: String,
    /// Private key that signs service-account tokens (its public half verifies them).
    pub service_account_key: String,
    /// Public half of the service-account key (the API server wants it as a separate PEM).
    pub service_account_pub: String,
    /// What the node agents' kubelet endpoint (`kubectl logs`) needs.
    pub kubelet: KubeletPki,
}

/// The kubelet API's TLS material: node agents serve with `serving_*` and accept only the
/// holder of `apiserver_client_*` (the API server's `--kubelet-client-certificate`).
#[derive(Debug, Clone)]
pub struct KubeletPki {
    /// PEM of the cluster CA (verifies the client certificate).
    pub ca_cert: String,
    /// Serving certificate for 127.0.0.1 and localhost, where every node agent listens.
    pub serving_cert: String,
    /// Key of the serving certificate.
    pub serving_key: String,
    /// Client certificate CN=kube-apiserver-kubelet-client, used by the API server only.
    pub apiserver_client_cert: String,
    /// Key of the API server's client certificate.
    pub apiserver_client_key: String,
}

impl Pki {
    /// Generates a fresh CA and everything signed by it.
    pub fn generate() -> Result<Pki, rcgen::Error> {
        let ca_key = KeyPair::generate()?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "ari-e2e-ca");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca_params.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca_params, ca_key);

        let serving_key = KeyPair::generate()?;
        let mut serving = CertificateParams::new(
            [
                "127.0.0.1",
                "localhost",
                "10.0.0.1",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ]
            .map(String::from)
            .to_vec(),
        )?;
        serving
            .distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        serving.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        let serving_cert = serving.signed_by(&serving_key, &issuer)?;

        let admin_key = KeyPair::generate()?;
        let mut admin = CertificateParams::new(Vec::<String>::new())?;
        admin.distinguished_name.push(DnType::CommonName, "admin");
        admin
            .distinguished_name
            .push(DnType::OrganizationName, "system:masters");
        admin.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        admin.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let admin_cert = admin.signed_by(&admin_key, &issuer)?;

        let service_account_key = KeyPair::generate()?;

        let kubelet_key = KeyPair::generate()?;
        let mut kubelet =
            CertificateParams::new(["127.0.0.1", "localhost"].map(String::from).to_vec())?;
        kubelet
            .distinguished_name
            .push(DnType::CommonName, "ari-e2e-node-agent");
        kubelet.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        kubelet.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        let kubelet_cert = kubelet.signed_by(&kubelet_key, &issuer)?;

        let to_kubelet_key = KeyPair::generate()?;
        let mut to_kubelet = CertificateParams::new(Vec::<String>::new())?;
        to_kubelet
            .distinguished_name
            .push(DnType::CommonName, "kube-apiserver-kubelet-client");
        to_kubelet.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        to_kubelet.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let to_kubelet_cert = to_kubelet.signed_by(&to_kubelet_key, &issuer)?;

        Ok(Pki {
            kubelet: KubeletPki {
                ca_cert: ca_cert.pem(),
                serving_cert: kubelet_cert.pem(),
                serving_key: kubelet_key.serialize_pem(),
                apiserver_client_cert: to_kubelet_cert.pem(),
                apiserver_client_key: to_kubelet_key.serialize_pem(),
            },
            ca_cert: ca_cert.pem(),
            serving_cert: serving_cert.pem(),
            serving_key: serving_key.serialize_pem(),
            admin_cert: admin_cert.pem(),
            admin_key: admin_key.serialize_pem(),
            service_account_pub: service_account_key.public_key_pem(),
            service_account_key: service_account_key.serialize_pem(),
        })
    }
}
