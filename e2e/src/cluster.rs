//! A real control plane on loopback: etcd, kube-apiserver, kube-controller-manager and
//! kube-scheduler, each with its own directory and log file, torn down on drop.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::binaries;
use crate::certs::{KubeletPki, Pki};
use crate::error::{Error, Result, io_err};
use crate::http;
use crate::kubeconfig;
use crate::process::{ManagedProcess, Spawner, free_port};

/// How long each component may take to become ready on a loaded 2-core machine.
const READY_TIMEOUT: Duration = Duration::from_secs(180);

/// A running control plane. Dropping it kills every component and removes its files (set
/// `ARI_E2E_KEEP=1` to keep them for post-mortems).
pub struct Cluster {
    // Field order matters: processes die before the spawner thread and the directory go.
    processes: Mutex<Vec<ManagedProcess>>,
    /// Each component's flags, so [`Cluster::restart`] can start it again.
    args: Mutex<HashMap<String, Vec<String>>>,
    spawner: Spawner,
    dir: Option<tempfile::TempDir>,
    root: PathBuf,
    bin_dir: PathBuf,
    kubeconfig_path: PathBuf,
    config: Config,
    server: String,
    ca_pem: String,
    kubelet_pki: KubeletPki,
}

impl Cluster {
    /// Starts a control plane from the binaries of `scripts/control-plane.sh` (or
    /// `$ARI_CONTROL_PLANE_BIN`) and waits until it serves and its controllers run.
    pub async fn start() -> Result<Cluster> {
        Cluster::start_with(binaries::find_bin_dir()?).await
    }

    /// Like [`Cluster::start`] with an explicit bin directory.
    pub async fn start_with(bin_dir: PathBuf) -> Result<Cluster> {
        let dir = tempfile::Builder::new()
            .prefix("ari-e2e-cluster-")
            .tempdir()
            .map_err(io_err(std::env::temp_dir()))?;
        let root = dir.path().to_path_buf();
        let pki = Pki::generate()?;
        let pki_dir = mkdir(&root.join("pki"))?;
        let write = |name: &str, content: &str| -> Result<PathBuf> {
            let p = pki_dir.join(name);
            std::fs::write(&p, content).map_err(io_err(&p))?;
            Ok(p)
        };
        let ca = write("ca.crt", &pki.ca_cert)?;
        let serving_cert = write("apiserver.crt", &pki.serving_cert)?;
        let serving_key = write("apiserver.key", &pki.serving_key)?;
        let sa_key = write("service-account.key", &pki.service_account_key)?;
        let sa_pub = write("service-account.pub", &pki.service_account_pub)?;
        let to_kubelet_cert = write(
            "apiserver-kubelet-client.crt",
            &pki.kubelet.apiserver_client_cert,
        )?;
        let to_kubelet_key = write(
            "apiserver-kubelet-client.key",
            &pki.kubelet.apiserver_client_key,
        )?;

        let (etcd_port, peer_port, api_port, kcm_port, sched_port) = (
            free_port()?,
            free_port()?,
            free_port()?,
            free_port()?,
            free_port()?,
        );
        let server = format!("https://127.0.0.1:{api_port}");
        let kubeconfig_path = root.join("admin.kubeconfig");
        let kc =
            kubeconfig::with_client_cert(&server, &pki.ca_cert, &pki.admin_cert, &pki.admin_key);
        std::fs::write(&kubeconfig_path, &kc).map_err(io_err(&kubeconfig_path))?;
        let config = Config::from_custom_kubeconfig(
            Kubeconfig::from_yaml(&kc)?,
            &KubeConfigOptions::default(),
        )
        .await?;

        let mut cluster = Cluster {
            processes: Mutex::new(Vec::new()),
            args: Mutex::new(HashMap::new()),
            spawner: Spawner::new(),
            dir: Some(dir),
            root: root.clone(),
            bin_dir,
            kubeconfig_path: kubeconfig_path.clone(),
            config,
            server: server.clone(),
            ca_pem: pki.ca_cert.clone(),
            kubelet_pki: pki.kubelet.clone(),
        };
        let s = |p: &Path| p.display().to_string();

        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let etcd_dir = mkdir(&root.join("etcd"))?;
        cluster.spawn(
            "etcd",
            vec![
                "--name=default".into(),
                format!("--data-dir={}", s(&etcd_dir.join("data"))),
                format!("--listen-client-urls={etcd_url}"),
                format!("--advertise-client-urls={etcd_url}"),
                format!("--listen-peer-urls={peer_url}"),
                format!("--initial-advertise-peer-urls={peer_url}"),
                format!("--initial-cluster=default={peer_url}"),
                "--unsafe-no-fsync=true".into(),
                "--log-level=warn".into(),
            ],
        )?;
        cluster
            .wait_until("etcd", || async {
                match http::get(&format!("{etcd_url}/health"), Duration::from_secs(2)).await {
                    Ok((200, body)) if body.contains("true") => Ok(true),
                    Ok((code, body)) => Err(format!("{code}: {body}")),
                    Err(e) => Err(e),
                }
            })
            .await?;

        let api_dir = mkdir(&root.join("kube-apiserver"))?;
        cluster.spawn(
            "kube-apiserver",
            vec![
                format!("--etcd-servers={etcd_url}"),
                format!("--cert-dir={}", s(&api_dir)),
                format!("--secure-port={api_port}"),
                "--bind-address=127.0.0.1".into(),
                "--advertise-address=127.0.0.1".into(),
                "--service-cluster-ip-range=10.0.0.0/24".into(),
                "--allow-privileged=true".into(),
                "--authorization-mode=Node,RBAC".into(),
                format!("--client-ca-file={}", s(&ca)),
                format!("--tls-cert-file={}", s(&serving_cert)),
                format!("--tls-private-key-file={}", s(&serving_key)),
                // `kubectl logs`: the node agents' kubelet endpoint, verified against the CA,
                // on the Node's InternalIP (its Hostname does not resolve).
                format!("--kubelet-certificate-authority={}", s(&ca)),
                format!("--kubelet-client-certificate={}", s(&to_kubelet_cert)),
                format!("--kubelet-client-key={}", s(&to_kubelet_key)),
                "--kubelet-preferred-address-types=InternalIP".into(),
                format!("--service-account-issuer={server}"),
                format!("--service-account-key-file={}", s(&sa_pub)),
                format!("--service-account-signing-key-file={}", s(&sa_key)),
                "--enable-admission-plugins=ServiceAccount,NamespaceLifecycle,LimitRanger,ResourceQuota,DefaultStorageClass".into(),
                "--endpoint-reconciler-type=none".into(),
            ],
        )?;
        let client = cluster.try_client()?;
        cluster
            .wait_until("kube-apiserver", || {
                let client = client.clone();
                async move {
                    let req = ::http::Request::get("/readyz")
                        .body(Vec::new())
                        .map_err(|e| e.to_string())?;
                    match client.request_text(req).await {
                        Ok(body) if body.trim() == "ok" => Ok(true),
                        Ok(body) => Err(body),
                        Err(e) => Err(e.to_string()),
                    }
                }
            })
            .await?;

        let kubeconfig_arg = format!("--kubeconfig={}", s(&kubeconfig_path));
        let authn = format!("--authentication-kubeconfig={}", s(&kubeconfig_path));
        let authz = format!("--authorization-kubeconfig={}", s(&kubeconfig_path));
        cluster.spawn(
            "kube-controller-manager",
            vec![
                kubeconfig_arg.clone(),
                authn.clone(),
                authz.clone(),
                "--controllers=*".into(),
                "--use-service-account-credentials=true".into(),
                format!("--root-ca-file={}", s(&ca)),
                format!("--service-account-private-key-file={}", s(&sa_key)),
                "--leader-elect=false".into(),
                "--bind-address=127.0.0.1".into(),
                format!("--secure-port={kcm_port}"),
                format!(
                    "--cert-dir={}",
                    s(&mkdir(&root.join("kube-controller-manager"))?)
                ),
            ],
        )?;
        cluster.spawn(
            "kube-scheduler",
            vec![
                kubeconfig_arg,
                authn,
                authz,
                "--leader-elect=false".into(),
                "--bind-address=127.0.0.1".into(),
                format!("--secure-port={sched_port}"),
                format!("--cert-dir={}", s(&mkdir(&root.join("kube-scheduler"))?)),
            ],
        )?;
        // The service-account controller creating `default` proves the controller manager
        // runs; namespaces are useless for pods before that.
        cluster.wait_for_default_sa(&client, "default").await?;
        Ok(cluster)
    }

    fn spawn(&mut self, name: &str, args: Vec<String>) -> Result<()> {
        let dir = mkdir(&self.root.join(name))?;
        let p = self
            .spawner
            .spawn(name, &self.bin_dir.join(name), &args, &dir.join("log"))?;
        self.procs().push(p);
        self.args
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.to_string(), args);
        Ok(())
    }

    /// Kills a component (SIGKILL, as a crash would) and starts it again with the same flags,
    /// for fault-injection tests; the previous log is kept as `log.<n>`. For `kube-apiserver`
    /// it returns once the server is ready again.
    pub async fn restart(&self, name: &str) -> Result<()> {
        let args = self
            .args
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
            .ok_or_else(|| Error::Other(format!("no component {name}")))?;
        let old = {
            let mut procs = self.procs();
            let i = procs
                .iter()
                .position(|p| p.name == name)
                .ok_or_else(|| Error::Other(format!("component {name} is not running")))?;
            procs.remove(i)
        };
        drop(old); // kills and reaps
        let log = self.log_path(name);
        let n = (1..)
            .find(|n| !log.with_extension(n.to_string()).exists())
            .unwrap_or(0);
        let kept = log.with_extension(n.to_string());
        std::fs::rename(&log, &kept).map_err(io_err(&kept))?;
        let p = self
            .spawner
            .spawn(name, &self.bin_dir.join(name), &args, &log)?;
        self.procs().push(p);
        if name == "kube-apiserver" {
            let client = self.try_client()?;
            let deadline = Instant::now() + READY_TIMEOUT;
            loop {
                self.check_running()?;
                let req = ::http::Request::get("/readyz")
                    .body(Vec::new())
                    .map_err(|e| Error::Other(e.to_string()))?;
                let last = match client.request_text(req).await {
                    Ok(body) if body.trim() == "ok" => return Ok(()),
                    Ok(body) => body,
                    Err(e) => e.to_string(),
                };
                if Instant::now() > deadline {
                    return Err(Error::Timeout {
                        what: "kube-apiserver after restart".into(),
                        secs: READY_TIMEOUT.as_secs(),
                        detail: last,
                    });
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        Ok(())
    }

    /// Polls `probe` until it returns true, failing early if a component dies.
    async fn wait_until<F, Fut>(&mut self, what: &str, mut probe: F) -> Result<()>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = std::result::Result<bool, String>>,
    {
        let deadline = Instant::now() + READY_TIMEOUT;
        let mut last = String::from("no answer yet");
        loop {
            self.check_running()?;
            match probe().await {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(e) => last = e,
            }
            if Instant::now() > deadline {
                return Err(Error::Timeout {
                    what: what.into(),
                    secs: READY_TIMEOUT.as_secs(),
                    detail: last,
                });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn wait_for_default_sa(&mut self, client: &Client, ns: &str) -> Result<()> {
        let api: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
        self.wait_until(&format!("ServiceAccount {ns}/default"), || {
            let api = api.clone();
            async move {
                api.get_opt("default")
                    .await
                    .map(|sa| sa.is_some())
                    .map_err(|e| e.to_string())
            }
        })
        .await
    }

    /// Fails if a component has exited; tests call it to explain a hang.
    pub fn check_running(&self) -> Result<()> {
        self.procs()
            .iter_mut()
            .try_for_each(ManagedProcess::check_running)
    }

    fn procs(&self) -> std::sync::MutexGuard<'_, Vec<ManagedProcess>> {
        // A panic while holding the lock leaves the list intact, so poisoning is harmless.
        self.processes.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn try_client(&self) -> Result<Client> {
        Ok(Client::try_from(self.config.clone())?)
    }

    /// An admin client (system:masters). Must be called inside a Tokio runtime.
    pub fn client(&self) -> Client {
        // The same config already produced a working client in `start`, so this cannot fail
        // unless the process ran out of resources.
        self.try_client()
            .unwrap_or_else(|e| panic!("admin client from a config that worked before: {e}"))
    }

    /// The admin client configuration, for clients built in other runtimes.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Path of the admin kubeconfig.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig_path
    }

    /// `https://127.0.0.1:<port>` of the API server.
    pub fn server_url(&self) -> &str {
        &self.server
    }

    /// PEM of the cluster CA.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// TLS material of the node agents' kubelet endpoint (what serves `kubectl logs`).
    pub fn kubelet_pki(&self) -> &KubeletPki {
        &self.kubelet_pki
    }

    /// Directory holding the control-plane binaries (also `kubectl` and `helm`).
    pub fn bin_dir(&self) -> &Path {
        &self.bin_dir
    }

    /// The cluster's working directory: `<component>/log` for each component.
    pub fn dir(&self) -> &Path {
        &self.root
    }

    /// Log file of a component (`etcd`, `kube-apiserver`, ...).
    pub fn log_path(&self, component: &str) -> PathBuf {
        self.root.join(component).join("log")
    }

    /// Runs the bundled `kubectl` against this cluster as admin.
    pub fn kubectl<I, S>(&self, args: I) -> Result<Output>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        let bin = self.bin_dir.join("kubectl");
        std::process::Command::new(&bin)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig_path)
            .args(args)
            .output()
            .map_err(io_err(bin))
    }

    /// `kubectl` with `plugins` first on its `PATH`, where it finds `kubectl-*` plugins, and
    /// this cluster's kubeconfig in `KUBECONFIG`.
    pub fn kubectl_with_plugins(&self, plugins: &std::path::Path, args: &[&str]) -> Result<Output> {
        let bin = self.bin_dir.join("kubectl");
        let path = std::env::var_os("PATH").unwrap_or_default();
        let mut dirs = vec![plugins.to_path_buf()];
        dirs.extend(std::env::split_paths(&path));
        let path = std::env::join_paths(dirs).map_err(|e| Error::Other(e.to_string()))?;
        // kubectl takes no flags before a plugin's name: the kubeconfig goes by its variable,
        // which the plugin reads as kubectl does.
        std::process::Command::new(&bin)
            .env("PATH", path)
            .env("KUBECONFIG", &self.kubeconfig_path)
            .args(args)
            .output()
            .map_err(io_err(bin))
    }

    /// Creates a namespace named `<prefix>-<random>` and waits for its `default`
    /// ServiceAccount, so pods can be created in it at once.
    pub async fn new_namespace(&self, prefix: &str) -> Result<String> {
        let client = self.try_client()?;
        new_namespace(&client, prefix).await
    }
}

/// Creates a namespace `<prefix>-<random>` and waits for its default ServiceAccount.
pub async fn new_namespace(client: &Client, prefix: &str) -> Result<String> {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns = Namespace {
        metadata: ObjectMeta {
            generate_name: Some(format!("{prefix}-")),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    let created = api.create(&PostParams::default(), &ns).await?;
    let name = created
        .metadata
        .name
        .ok_or_else(|| Error::Other("created namespace has no name".into()))?;
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), &name);
    let deadline = Instant::now() + READY_TIMEOUT;
    while sas.get_opt("default").await?.is_none() {
        if Instant::now() > deadline {
            return Err(Error::Timeout {
                what: format!("ServiceAccount {name}/default"),
                secs: READY_TIMEOUT.as_secs(),
                detail: "kube-controller-manager did not create it".into(),
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(name)
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let mut procs = self.procs();
        for p in procs.iter_mut().rev() {
            p.stop();
        }
        procs.clear();
        drop(procs);
        if std::env::var_os("ARI_E2E_KEEP").is_some_and(|v| !v.is_empty() && v != "0")
            && let Some(dir) = self.dir.take()
        {
            eprintln!("ari-e2e: kept cluster files in {}", dir.keep().display());
        }
    }
}

fn mkdir(p: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(p).map_err(io_err(p))?;
    Ok(p.to_path_buf())
}
