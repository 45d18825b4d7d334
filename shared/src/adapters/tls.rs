//! The process's one TLS client configuration, and the AWS SDK's HTTPS
//! client built on it.
//!
//! One `rustls::ClientConfig` (rustls 0.23 on aws-lc-rs, TLS 1.2 and 1.3,
//! the provider's default suites) is built once per process, on first use,
//! and shared: every pinned MCP client (`adapters::mcp`, through reqwest's
//! preconfigured TLS, [`Tls::reqwest`]), the traces' exporter and the reply
//! to CloudFormation (the same), and every AWS SDK client ([`sdk_http_client`], through
//! `SdkConfig::http_client`) verify with it. Each takes a clone (the
//! verifier and its root store are behind one `Arc`) with its own ALPN: the
//! SDK's client offers `h2` and `http/1.1`, reqwest here speaks HTTP/1.1
//! only.
//!
//! The roots are Mozilla's, compiled in (`webpki-roots`), not read from the
//! system's bundle at start. Reading and decoding that bundle (220 KB of PEM
//! here; Lambda's image has the same Mozilla set) costs about 16 M
//! instructions, the largest single part of a function's cold start, and
//! before this module every pinned MCP client paid it again. Compiled in,
//! the trust anchors are already parsed: building the root store copies
//! references. A root store change arrives with a `webpki-roots` release
//! (`cargo update -p webpki-roots`), not with the runtime image.
//!
//! The SDK's own HTTPS client (`aws-smithy-http-client` 1.5) cannot take a
//! `ClientConfig`: its public options are a trust store of native roots and
//! PEM certificates, decoded again for every connector it builds, and a
//! crypto mode; the connector wrapper that would accept our own TLS
//! connector is crate-private. So [`sdk_http_client`] is the same stack the
//! SDK's default client is (hyper 1's pooled client, hyper-rustls) over this
//! configuration, with the connector settings the SDK passes (connect and
//! read timeouts), the SDK's error classes for retries, and connection
//! poisoning.
//!
//! Production trusts exactly these roots. [`Tls::trusting`] adds one more,
//! for a test's server whose root was made at test time; no environment
//! variable, file or configuration value reaches it, and every function
//! binary builds its clients from [`Tls::process`].

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, LazyLock, RwLock};
use std::time::Duration;

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::connection::{CaptureSmithyConnection, ConnectionMetadata};
use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpClient, SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::{HttpRequest, HttpResponse};
use aws_smithy_runtime_api::client::result::ConnectorError;
use aws_smithy_runtime_api::client::runtime_components::{RuntimeComponents, RuntimeComponentsBuilder};
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::config_bag::ConfigBag;
use aws_smithy_types::retry::ErrorKind;
use hyper_util::client::legacy::connect::{HttpConnector as TcpConnector, capture_connection};
use hyper_util::rt::{TokioExecutor, TokioTimer};
use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;

/// The TLS client configuration: roots, verifier, crypto provider.
#[derive(Clone)]
pub struct Tls {
    config: Arc<rustls::ClientConfig>,
    anchors: usize,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls").finish_non_exhaustive()
    }
}

static PROCESS: LazyLock<Tls> = LazyLock::new(|| Tls::with_roots(mozilla_roots()));

fn mozilla_roots() -> RootCertStore {
    RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    }
}

impl Tls {
    /// The process's configuration, built on first use and shared after.
    pub fn process() -> Tls {
        PROCESS.clone()
    }

    /// Mozilla's roots and `root` (DER): a test's server, whose root the
    /// test made. Production never calls this.
    pub fn trusting(root: CertificateDer<'static>) -> Result<Tls, rustls::Error> {
        let mut roots = mozilla_roots();
        roots.add(root)?;
        Ok(Tls::with_roots(roots))
    }

    fn with_roots(roots: RootCertStore) -> Tls {
        let anchors = roots.len();
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            // aws-lc-rs supports TLS 1.2 and 1.3: the safe defaults cannot be refused.
            .unwrap_or_else(|_| unreachable!("aws-lc-rs supports the default protocol versions"))
            .with_root_certificates(roots)
            .with_no_client_auth();
        Tls {
            config: Arc::new(config),
            anchors,
        }
    }

    /// How many trust anchors it has.
    pub fn anchors(&self) -> usize {
        self.anchors
    }

    /// Whether `other` is this very configuration (the same allocation).
    pub fn same(&self, other: &Tls) -> bool {
        Arc::ptr_eq(&self.config, &other.config)
    }

    /// A reqwest client builder on this configuration (HTTP/1.1): the
    /// pinned MCP clients, the traces' exporter, the reply to
    /// CloudFormation.
    pub fn reqwest(&self) -> reqwest::ClientBuilder {
        reqwest::Client::builder().tls_backend_preconfigured(self.client_config(&[b"http/1.1"]))
    }

    /// A copy offering `alpn`, sharing the verifier and its roots.
    pub fn client_config(&self, alpn: &[&[u8]]) -> rustls::ClientConfig {
        let mut config = (*self.config).clone();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        config
    }
}

/// The AWS SDK's HTTP client over `tls`: give it to `SdkConfig` once, and
/// every SDK client of the process uses it (and its connection pool).
pub fn sdk_http_client(tls: &Tls) -> SharedHttpClient {
    SharedHttpClient::new(SdkHttpClient {
        tls: Arc::new(tls.client_config(&[b"h2", b"http/1.1"])),
        connectors: RwLock::default(),
    })
}

/// A connector's settings: (connect timeout, read timeout).
type Timeouts = (Option<Duration>, Option<Duration>);

/// One connector per [`Timeouts`], as the SDK's own client keeps them.
struct SdkHttpClient {
    tls: Arc<rustls::ClientConfig>,
    connectors: RwLock<HashMap<Timeouts, SharedHttpConnector>>,
}

impl fmt::Debug for SdkHttpClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SdkHttpClient").finish_non_exhaustive()
    }
}

impl HttpClient for SdkHttpClient {
    fn http_connector(&self, settings: &HttpConnectorSettings, _: &RuntimeComponents) -> SharedHttpConnector {
        let key = (settings.connect_timeout(), settings.read_timeout());
        if let Some(connector) = self.connectors.read().ok().and_then(|c| c.get(&key).cloned()) {
            return connector;
        }
        let connector = SharedHttpConnector::new(SdkConnector::new(self.tls.clone(), key.0, key.1));
        match self.connectors.write() {
            Ok(mut connectors) => connectors.entry(key).or_insert(connector).clone(),
            Err(_) => connector,
        }
    }

    // The SDK's own client builds a connector here (to load the system's
    // roots at start); this one has nothing to load.
    fn validate_base_client_config(&self, _: &RuntimeComponentsBuilder, _: &ConfigBag) -> Result<(), BoxError> {
        Ok(())
    }
}

type Https = hyper_rustls::HttpsConnector<TcpConnector>;

/// The connect timeout over the whole connection, DNS, TCP and the TLS
/// handshake alike, as the SDK's own client bounds it: a server that
/// accepts and then says nothing is a timeout (retried), not a call held
/// until the function's own limit. (hyper-util's TCP timeout alone would
/// bound the TCP connect only, split across the resolved addresses.)
#[derive(Clone)]
struct Connect {
    https: Https,
    limit: Option<Duration>,
}

type Connecting = <Https as tower_service::Service<hyper::Uri>>::Response;

impl tower_service::Service<hyper::Uri> for Connect {
    type Response = Connecting;
    type Error = BoxError;
    type Future = std::pin::Pin<Box<dyn std::future::Future<Output = Result<Connecting, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), BoxError>> {
        self.https.poll_ready(cx)
    }

    fn call(&mut self, uri: hyper::Uri) -> Self::Future {
        let connecting = self.https.call(uri);
        let limit = self.limit;
        Box::pin(async move {
            match limit {
                // `Elapsed` in the error's chain: `classify` says timeout.
                Some(limit) => tokio::time::timeout(limit, connecting).await?,
                None => connecting.await,
            }
        })
    }
}

struct SdkConnector {
    client: hyper_util::client::legacy::Client<Connect, SdkBody>,
    read_timeout: Option<Duration>,
}

impl fmt::Debug for SdkConnector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SdkConnector").finish_non_exhaustive()
    }
}

impl SdkConnector {
    fn new(tls: Arc<rustls::ClientConfig>, connect_timeout: Option<Duration>, read_timeout: Option<Duration>) -> Self {
        let mut tcp = TcpConnector::new();
        tcp.enforce_http(false);
        tcp.set_nodelay(true);
        // http or https by the endpoint's scheme (moto on loopback is http);
        // HTTP/2 where the server picks `h2` by ALPN.
        let https = Connect {
            https: hyper_rustls::HttpsConnector::from((tcp, tls)),
            limit: connect_timeout,
        };
        let mut builder = hyper_util::client::legacy::Client::builder(TokioExecutor::new());
        // The pool's idle timer needs a timer to run.
        builder.pool_timer(TokioTimer::new());
        Self {
            client: builder.build(https),
            read_timeout,
        }
    }
}

impl HttpConnector for SdkConnector {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let mut request = match request.try_into_http1x() {
            Ok(request) => request,
            Err(e) => return HttpConnectorFuture::ready(Err(ConnectorError::user(e.into()))),
        };
        // What the orchestrator poisons after a transient failure, so the
        // pool does not hand the connection out again.
        let captured = capture_connection(&mut request);
        if let Some(capture) = request.extensions().get::<CaptureSmithyConnection>() {
            capture.set_connection_retriever(move || {
                captured.connection_metadata().as_ref()?;
                let for_poison = captured.clone();
                Some(
                    ConnectionMetadata::builder()
                        .proxied(false)
                        .poison_fn(move || {
                            if let Some(connection) = for_poison.connection_metadata().as_ref() {
                                connection.poison();
                            }
                        })
                        .build(),
                )
            });
        }
        let response = self.client.request(request);
        let read_timeout = self.read_timeout;
        HttpConnectorFuture::new(async move {
            let answered = match read_timeout {
                Some(limit) => match tokio::time::timeout(limit, response).await {
                    Ok(answered) => answered,
                    Err(elapsed) => return Err(ConnectorError::timeout(elapsed.into())),
                },
                None => response.await,
            };
            match answered {
                Ok(response) => HttpResponse::try_from(response.map(SdkBody::from_body_1_x))
                    .map_err(|e| ConnectorError::other(e.into(), None)),
                Err(e) => Err(classify(e)),
            }
        })
    }
}

/// The SDK's classes: a failed or closed connection is I/O (retried), and
/// so is an HTTP/2 connection going away or a stream it refused; a connect
/// that ran out of time is a timeout (retried). A refused certificate or
/// other TLS failure is not retried, where the SDK's legacy client retries
/// it as I/O (its newer pool does not): a certificate that failed once
/// fails again (`tests/suite/tls.rs`). A request the client could not
/// send is the caller's.
fn classify(error: hyper_util::client::legacy::Error) -> ConnectorError {
    #[derive(Clone, Copy)]
    enum Class {
        Timeout,
        User,
        Io,
        Transient,
        Other,
    }
    let class = {
        let chain = || error_chain(&error);
        let hyper = chain().find_map(|e| e.downcast_ref::<hyper::Error>());
        let h2 = chain().find_map(|e| e.downcast_ref::<h2::Error>());
        if chain().any(|e| e.is::<rustls::Error>()) {
            Class::Other
        } else if hyper.is_some_and(hyper::Error::is_timeout) || chain().any(|e| e.is::<tokio::time::error::Elapsed>())
        {
            Class::Timeout
        } else if hyper.is_some_and(hyper::Error::is_user) {
            Class::User
        } else if hyper.is_some_and(hyper::Error::is_incomplete_message) {
            Class::Transient
        } else if hyper.is_some_and(|h| h.is_closed() || h.is_canceled())
            || error.is_connect()
            || chain().any(|e| e.is::<std::io::Error>())
            || h2
                .is_some_and(|h2| h2.is_go_away() || (h2.is_reset() && h2.reason() == Some(h2::Reason::REFUSED_STREAM)))
        {
            Class::Io
        } else {
            Class::Other
        }
    };
    let error: BoxError = error.into();
    match class {
        Class::Timeout => ConnectorError::timeout(error),
        Class::User => ConnectorError::user(error),
        Class::Io => ConnectorError::io(error),
        Class::Transient => ConnectorError::other(error, Some(ErrorKind::TransientError)),
        Class::Other => ConnectorError::other(error, None),
    }
}

/// `error` and its causes; after an `io::Error` its payload (hyper-rustls
/// wraps the rustls error in one).
pub(crate) fn error_chain<'a>(
    error: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(error), |&e| match e.downcast_ref::<std::io::Error>() {
        Some(io) => io.get_ref().map(|inner| inner as &(dyn std::error::Error + 'static)),
        None => e.source(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_process_has_one_configuration_with_mozillas_roots() {
        let tls = Tls::process();
        assert!(tls.same(&Tls::process()), "built once, shared after");
        assert_eq!(tls.anchors(), webpki_roots::TLS_SERVER_ROOTS.len());
        assert!(tls.anchors() > 100, "{}", tls.anchors());
        let http1 = tls.client_config(&[b"http/1.1"]);
        assert_eq!(http1.alpn_protocols, vec![b"http/1.1".to_vec()]);
        assert!(tls.config.alpn_protocols.is_empty(), "a copy's ALPN is its own");
    }

    /// A server that accepts the TCP connection and never answers the TLS
    /// handshake: the connect timeout bounds it, and the SDK is told it
    /// timed out (retried). No read timeout is set, so nothing else could
    /// end the call.
    #[tokio::test]
    async fn a_handshake_that_never_comes_is_a_connect_timeout() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let port = listener.local_addr().expect("its address").port();
        let held = tokio::spawn(async move {
            let mut kept = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                kept.push(stream);
            }
        });
        let connector = SdkConnector::new(
            Arc::new(Tls::process().client_config(&[b"http/1.1"])),
            Some(Duration::from_millis(200)),
            None,
        );
        let mut request = HttpRequest::empty();
        request.set_uri(format!("https://127.0.0.1:{port}/")).expect("a URI");
        let answered = tokio::time::timeout(Duration::from_secs(30), connector.call(request))
            .await
            .expect("the connect timeout ends the call");
        let error = answered.expect_err("nothing answered");
        assert!(error.is_timeout(), "{error:?}");
        held.abort();
    }

    /// A loopback HTTP/1.1 server that answers every request `200` with no
    /// body, with `close` as its `Connection` header when given: how many
    /// connections it accepted.
    async fn serve(close: bool) -> (u16, Arc<std::sync::atomic::AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let port = listener.local_addr().expect("its address").port();
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = accepted.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                tokio::spawn(async move {
                    let answer: &[u8] = if close {
                        b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                    } else {
                        b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"
                    };
                    let mut read = Vec::new();
                    let mut buffer = [0u8; 4096];
                    while stream.readable().await.is_ok() {
                        match stream.try_read(&mut buffer) {
                            Ok(0) => return,
                            Ok(n) => read.extend_from_slice(&buffer[..n]),
                            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                            Err(_) => return,
                        }
                        // One answer for each request read whole (no bodies are sent).
                        while let Some(end) = read.windows(4).position(|w| w == b"\r\n\r\n") {
                            read.drain(..end + 4);
                            if stream.writable().await.is_err() || stream.try_write(answer).is_err() {
                                return;
                            }
                            if close {
                                return;
                            }
                        }
                    }
                });
            }
        });
        (port, accepted)
    }

    /// A connector keeps its connections: a second request to the same
    /// endpoint goes over the first one's (in AWS a new one costs a TCP and
    /// a TLS handshake). moto answers `Connection: close`, so locally each
    /// request opens one (infra/FIDELITY.md).
    #[tokio::test]
    async fn a_second_request_reuses_the_connection_unless_the_server_closes_it() {
        for (close, connections) in [(false, 1), (true, 2)] {
            let (port, accepted) = serve(close).await;
            let connector = SdkConnector::new(
                Arc::new(Tls::process().client_config(&[b"http/1.1"])),
                Some(Duration::from_secs(5)),
                Some(Duration::from_secs(5)),
            );
            for _ in 0..2 {
                let mut request = HttpRequest::empty();
                request.set_uri(format!("http://127.0.0.1:{port}/")).expect("a URI");
                let response = connector.call(request).await.expect("answered");
                assert_eq!(response.status().as_u16(), 200);
            }
            assert_eq!(
                accepted.load(std::sync::atomic::Ordering::SeqCst),
                connections,
                "connection: close {close}"
            );
        }
    }

    #[test]
    fn a_root_that_is_not_a_certificate_is_refused() {
        assert!(Tls::trusting(CertificateDer::from(vec![0x30, 0x03, 0x02, 0x01, 0x01])).is_err());
    }
}
