//! What the Agent controller hands executors of a namespace-declared resource an Agent is
//! granted by name (a ModelConfig, an MCPServer): those usable, in grant order, and why the
//! others are not, under the marked-Secret rule for their credentials.

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ListParams};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;

use crate::marked::{self, Credentials};

/// What the pure `resolve` of a kind decides from, read from the API: the namespace's
/// resources of kind `K` (one list) and the metadata, never the data, of the credentials
/// Secrets the granted ones reference (`secrets` lists a resource's).
pub struct Fetched<K> {
    pub items: Vec<K>,
    metas: Vec<(String, ObjectMeta)>,
}

impl<K> Fetched<K>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>,
    K: Clone + DeserializeOwned + std::fmt::Debug,
{
    pub async fn read(
        granted: &[String],
        client: &Client,
        ns: &str,
        secrets: fn(&K) -> Vec<&str>,
    ) -> Result<Self, kube::Error> {
        let items = Api::<K>::namespaced(client.clone(), ns)
            .list(&ListParams::default())
            .await?
            .items;
        let referenced: Vec<&str> = items
            .iter()
            .filter(|k| granted.contains(&k.name_any()))
            .flat_map(secrets)
            .collect();
        let metas = marked::secret_metas(client, ns, &referenced).await?;
        Ok(Self { items, metas })
    }
}

impl<K> Fetched<K> {
    /// The metadata of the credentials Secret `name`, if it was read (`None`: not found).
    pub fn secret_meta(&self, name: &str) -> Option<&ObjectMeta> {
        self.metas.iter().find(|(n, _)| n == name).map(|(_, m)| m)
    }
}

/// Why a granted resource is not handed to the executors (its calls then fail `unavailable`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unusable {
    /// No resource of that name in the Agent's namespace.
    NotFound,
    /// The credentials name the attestation key or no Secret name.
    CredentialsForbidden,
    /// A credentials Secret does not exist.
    CredentialsMissing,
    /// A credentials Secret lacks its kind's mark.
    CredentialsNotMarked,
}

impl Unusable {
    /// Why credentials that read as `c` make a resource unusable; `None` when they do not.
    pub fn of(c: Credentials) -> Option<Unusable> {
        match c {
            Credentials::None | Credentials::Marked => None,
            Credentials::Forbidden => Some(Unusable::CredentialsForbidden),
            Credentials::Missing => Some(Unusable::CredentialsMissing),
            Credentials::NotMarked => Some(Unusable::CredentialsNotMarked),
        }
    }
}

/// What a kind's resources are called in a condition message, and the label its Secrets need.
#[derive(Debug, Clone, Copy)]
pub struct Kind {
    /// `model`, `tool server`.
    pub noun: &'static str,
    /// `ModelConfig`, `MCPServer`.
    pub kind: &'static str,
    pub label: &'static str,
}

impl Kind {
    fn describe(&self, why: Unusable) -> String {
        match why {
            Unusable::NotFound => format!("no {} of that name in the Agent's namespace", self.kind),
            Unusable::CredentialsForbidden => {
                "its credentials name a Secret an Agent may not use".to_owned()
            }
            Unusable::CredentialsMissing => "its credentials Secret does not exist".to_owned(),
            Unusable::CredentialsNotMarked => {
                format!("its credentials Secret is not labelled {}=true", self.label)
            }
        }
    }
}

/// The granted resources of one kind: those the executors get, in grant order, and those they
/// do not.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved<T> {
    pub usable: Vec<T>,
    pub unusable: Vec<(String, Unusable)>,
}

impl<T> Default for Resolved<T> {
    fn default() -> Self {
        Resolved {
            usable: Vec::new(),
            unusable: Vec::new(),
        }
    }
}

impl<T> Resolved<T> {
    /// One line for the Agent's availability condition (empty when all are usable).
    pub fn message(&self, kind: &Kind) -> String {
        self.unusable
            .iter()
            .map(|(name, why)| format!("{} {name}: {}", kind.noun, kind.describe(*why)))
            .collect::<Vec<_>>()
            .join("; ")
    }
}
