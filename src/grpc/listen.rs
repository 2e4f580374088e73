//! Where the server accepts connections: a TCP address (`host:port`) or a Unix domain socket
//! (`unix:/path`), chosen by the `listen` config key.

use std::{
    io,
    os::unix::fs::FileTypeExt,
    path::{Path, PathBuf},
};

use tokio::net::{TcpListener, UnixListener};

/// The prefix of a Unix-socket `listen` value.
pub const UNIX_PREFIX: &str = "unix:";

/// A bound listener. Tests pass a `TcpListener` bound to port 0 (it converts with `into()`).
#[derive(Debug)]
pub enum Listener {
    /// `host:port`.
    Tcp(TcpListener),
    /// `unix:/path`; the path is kept so it can be reported and removed.
    Unix(UnixListener, PathBuf),
}

impl From<TcpListener> for Listener {
    fn from(l: TcpListener) -> Self {
        Self::Tcp(l)
    }
}

impl Listener {
    /// Binds `listen`: `unix:/path` is a Unix domain socket (a stale socket file left by a dead
    /// server is removed first; a live one, or a file that is not a socket, is an error), anything
    /// else a TCP address.
    pub async fn bind(listen: &str) -> io::Result<Self> {
        match listen.strip_prefix(UNIX_PREFIX) {
            Some(path) => {
                let path = PathBuf::from(path);
                remove_stale_socket(&path)?;
                let l = UnixListener::bind(&path)?;
                Ok(Self::Unix(l, path))
            }
            None => Ok(Self::Tcp(TcpListener::bind(listen).await?)),
        }
    }

    /// `127.0.0.1:50051` or `unix:/run/agentry.sock`, for logs.
    pub fn describe(&self) -> String {
        match self {
            Self::Tcp(l) => l
                .local_addr()
                .map_or_else(|e| format!("tcp (unknown address: {e})"), |a| a.to_string()),
            Self::Unix(_, p) => format!("{UNIX_PREFIX}{}", p.display()),
        }
    }

    /// The socket file to remove once serving has stopped, for a Unix listener.
    pub fn socket_path(&self) -> Option<&Path> {
        match self {
            Self::Tcp(_) => None,
            Self::Unix(_, p) => Some(p),
        }
    }
}

/// Removes `path` if it is a socket nobody listens on any more.
fn remove_stale_socket(path: &Path) -> io::Result<()> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if !meta.file_type().is_socket() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} exists and is not a socket", path.display()),
        ));
    }
    if std::os::unix::net::UnixStream::connect(path).is_ok() {
        return Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!("{} is in use by a running server", path.display()),
        ));
    }
    std::fs::remove_file(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn stale_socket_is_replaced_and_live_or_foreign_files_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("a.sock");
        let listen = format!("unix:{}", sock.display());
        let live = Listener::bind(&listen).await.unwrap();
        assert_eq!(live.describe(), listen);
        let e = Listener::bind(&listen).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse, "{e}");
        drop(live); // the file stays behind, as after a crash
        assert!(sock.exists());
        Listener::bind(&listen).await.unwrap();

        let file = dir.path().join("plain");
        std::fs::write(&file, "x").unwrap();
        let e = Listener::bind(&format!("unix:{}", file.display()))
            .await
            .unwrap_err();
        assert!(e.to_string().contains("not a socket"), "{e}");
        assert!(file.exists());
    }
}
