//! TLS for the local stand-ins: a certificate authority made when a test
//! runs ([`TestCa`]), a loopback listener that completes each handshake with
//! its server certificate (the https MCP fixture's), and [`TlsProxy`], TLS
//! in front of a plain loopback server (moto), for the AWS SDK's HTTPS path.
//! rustls on aws-lc-rs, as the functions' clients; bound to 127.0.0.1 only.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The TLS handshakes a server saw fail, with their errors.
pub(crate) type Refused = Arc<Mutex<Vec<String>>>;

/// A certificate authority made when the test runs: a root, and a server
/// certificate it issued for some names (DNS names or IP addresses).
pub struct TestCa {
    root: rustls::pki_types::CertificateDer<'static>,
    chain: Vec<rustls::pki_types::CertificateDer<'static>>,
    key: rustls::pki_types::PrivatePkcs8KeyDer<'static>,
}

impl TestCa {
    /// A fresh root (ECDSA P-256) and a server certificate for `names`.
    pub fn new(names: &[&str]) -> anyhow::Result<Self> {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
        let mut root_params = CertificateParams::new(Vec::<String>::new())?;
        root_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        // A name of its own: two test roots are two issuers.
        root_params.distinguished_name.push(
            DnType::CommonName,
            format!("scheduled-agent-tasks test root {}", uuid::Uuid::new_v4()),
        );
        root_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let root_key = KeyPair::generate()?;
        let root = root_params.self_signed(&root_key)?;
        let issuer = Issuer::from_params(&root_params, &root_key);
        let mut leaf_params = CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())?;
        leaf_params
            .distinguished_name
            .push(DnType::CommonName, "scheduled-agent-tasks test server");
        let leaf_key = KeyPair::generate()?;
        let leaf = leaf_params.signed_by(&leaf_key, &issuer)?;
        Ok(Self {
            root: root.der().clone(),
            chain: vec![leaf.der().clone()],
            key: rustls::pki_types::PrivatePkcs8KeyDer::from(leaf_key.serialize_der()),
        })
    }

    /// The root's certificate (DER), for the client to trust.
    pub fn root(&self) -> rustls::pki_types::CertificateDer<'static> {
        self.root.clone()
    }

    fn server_config(&self) -> anyhow::Result<rustls::ServerConfig> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(self.chain.clone(), self.key.clone_key().into())?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(config)
    }
}

/// Accepts TCP connections on loopback and completes each TLS handshake
/// before axum sees the stream; a failed handshake (a client that refused
/// the certificate) is dropped and the next connection accepted.
pub(crate) struct TlsListener {
    tcp: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    /// Handshakes that failed, with their error (tests read them).
    pub(crate) refused: Refused,
}

impl TlsListener {
    pub(crate) fn new(tcp: tokio::net::TcpListener, ca: &TestCa) -> anyhow::Result<Self> {
        Ok(Self {
            tcp,
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(ca.server_config()?)),
            refused: Refused::default(),
        })
    }

    /// The next connection whose handshake completed.
    pub(crate) async fn next(&mut self) -> (tokio_rustls::server::TlsStream<tokio::net::TcpStream>, SocketAddr) {
        loop {
            let Ok((stream, address)) = self.tcp.accept().await else {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            };
            let handshake = self.acceptor.accept(stream);
            match tokio::time::timeout(Duration::from_secs(10), handshake).await {
                Ok(Ok(tls)) => return (tls, address),
                Ok(Err(e)) => {
                    if let Ok(mut refused) = self.refused.lock() {
                        refused.push(e.to_string());
                    }
                }
                Err(_) => {
                    if let Ok(mut refused) = self.refused.lock() {
                        refused.push("the handshake did not finish within 10 s".to_owned());
                    }
                }
            }
        }
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        self.next().await
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}

/// TLS in front of a plain server on loopback (moto): each connection's
/// handshake is completed with the [`TestCa`]'s certificate, then its bytes
/// are copied to and from `upstream`. Dropping it stops it.
pub struct TlsProxy {
    port: u16,
    refused: Refused,
    task: tokio::task::JoinHandle<()>,
}

impl TlsProxy {
    pub async fn start(ca: &TestCa, upstream: SocketAddr) -> anyhow::Result<Self> {
        anyhow::ensure!(upstream.ip().is_loopback(), "the proxy forwards to loopback only");
        let tcp = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let port = tcp.local_addr()?.port();
        let mut listener = TlsListener::new(tcp, ca)?;
        let refused = listener.refused.clone();
        let task = tokio::spawn(async move {
            loop {
                let (mut tls, _) = listener.next().await;
                tokio::spawn(async move {
                    if let Ok(mut plain) = tokio::net::TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                    }
                });
            }
        });
        Ok(Self { port, refused, task })
    }

    /// `https://127.0.0.1:<port>`, for an SDK client's endpoint.
    pub fn endpoint(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// The handshakes it saw fail, with their errors.
    pub fn refused_handshakes(&self) -> Vec<String> {
        self.refused.lock().map(|r| r.clone()).unwrap_or_default()
    }
}

impl Drop for TlsProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}
