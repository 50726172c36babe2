//! TLS under tokio-postgres, with rustls (Cargo feature `tls`): `sslmode=require|verify-full`,
//! `ca=`, `cert=` and `key=`. Written here rather than taken from a crate: it is the one
//! `TlsConnect` tokio-postgres asks for, on the rustls (aws-lc-rs) the other backends already build.
//!
//! Both modes verify the server: its certificate chain against `ca=` (else the system's roots)
//! and its name against the URL's host (or `server_name=`). locksmith never talks to a server it
//! has not verified; libpq's `require`, which checks nothing, has no equivalent here.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::pki_types::ServerName;
use rustls::ClientConfig;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect};
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use locksmith_core::driver::tls::client_config;
use locksmith_core::driver::url::TlsFiles;
use locksmith_core::driver::BackendUrl;
use locksmith_core::Result;

/// What connects a socket with TLS, or (with `sslmode=disable`) is never asked to.
#[derive(Clone)]
pub(crate) struct Tls {
    /// `None`: TLS is off.
    config: Option<Arc<ClientConfig>>,
    /// The name to verify instead of the host's (`server_name=`).
    server_name: Option<String>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("on", &self.config.is_some())
            .finish_non_exhaustive()
    }
}

impl Tls {
    /// No TLS.
    pub fn off() -> Tls {
        Tls {
            config: None,
            server_name: None,
        }
    }

    /// TLS with `files` (read from `url`, which names them in errors): the configuration every
    /// backend builds ([`locksmith_core::driver::tls::client_config`]).
    pub fn new(url: &BackendUrl, files: &TlsFiles) -> Result<Tls> {
        let config = client_config(files).map_err(|e| url.error(e.to_string()))?;
        Ok(Tls {
            config: Some(config),
            server_name: files.server_name.clone(),
        })
    }
}

impl MakeTlsConnect<TcpStream> for Tls {
    type Stream = Stream;
    type TlsConnect = Connect;
    type Error = io::Error;

    /// Called for every connection, TLS or not (tokio-postgres makes the connector before it
    /// looks at the mode): with TLS off, a connector that is never used.
    fn make_tls_connect(&mut self, host: &str) -> io::Result<Connect> {
        let Some(config) = self.config.clone() else {
            return Ok(Connect(None));
        };
        let name = self.server_name.as_deref().unwrap_or(host).to_owned();
        let name = ServerName::try_from(name).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        Ok(Connect(Some((TlsConnector::from(config), name))))
    }
}

/// One TLS handshake to make (`None`: TLS is off, and tokio-postgres will not ask for it).
pub(crate) struct Connect(Option<(TlsConnector, ServerName<'static>)>);

impl TlsConnect<TcpStream> for Connect {
    type Stream = Stream;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Stream>> + Send>>;

    fn connect(self, socket: TcpStream) -> Self::Future {
        Box::pin(async move {
            let (connector, name) = self
                .0
                .ok_or_else(|| io::Error::other("TLS was asked for with sslmode=disable"))?;
            Ok(Stream(connector.connect(name, socket).await?))
        })
    }
}

/// A TLS connection to the server.
pub(crate) struct Stream(TlsStream<TcpStream>);

impl tokio_postgres::tls::TlsStream for Stream {
    /// None: SCRAM without channel binding (`scram-sha-256`, not `-PLUS`).
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}

impl AsyncRead for Stream {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for Stream {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}
