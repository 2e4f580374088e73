//! Where the server accepts connections: a TCP address (`host:port`) or a Unix domain socket
//! (`unix:/path`), chosen by the `listen` config key; and [`BatchedWrites`], the connection
//! wrapper that lets one write carry the replies of many concurrent calls.

use std::{
    io,
    os::unix::fs::FileTypeExt,
    path::{Path, PathBuf},
    pin::Pin,
    task::{Context, Poll},
};

use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::{TcpListener, UnixListener},
};

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

/// A server connection whose writes wait one turn of the scheduler.
///
/// Each call on an HTTP/2 connection runs as its own task; when one finishes it wakes the
/// connection's task, and the runtime runs that task next (tokio's LIFO slot), which writes the
/// one reply out in its own system call while the replies of the other calls that arrived in
/// the same packet are still being computed. Under load that is a `writev` — and a wake-up of
/// the client — per call. Here the first write of each flush yields instead: the connection's
/// task goes to the back of the run queue, the calls already queued finish, and the next write
/// carries all of their frames. A connection with nothing else queued runs again at once, so a
/// lone call pays one extra poll, not a wait. A write of [`BatchedWrites::ENOUGH`] or more goes
/// out at once: it is a large reply already, and waiting would only add polls to its chunks.
#[derive(Debug)]
pub struct BatchedWrites<T> {
    io: T,
    /// This flush has already yielded once: write for real until it completes.
    yielded: bool,
}

impl<T> BatchedWrites<T> {
    /// Writes at least this large are not held back.
    pub const ENOUGH: usize = 64 * 1024;

    /// Wraps an accepted connection.
    pub fn new(io: T) -> Self {
        Self { io, yielded: false }
    }

    /// A listener's stream of accepted connections (what tonic's `serve_with_incoming` takes)
    /// with each connection wrapped.
    pub fn incoming<E>(
        accepted: impl tokio_stream::Stream<Item = Result<T, E>>,
    ) -> impl tokio_stream::Stream<Item = Result<Self, E>> {
        tokio_stream::StreamExt::map(accepted, |c| c.map(Self::new))
    }

    /// `Pending` (with the task woken again at once) the first time in a flush, for a write of
    /// `len` bytes.
    fn yield_once(&mut self, cx: &mut Context<'_>, len: usize) -> Poll<()> {
        if self.yielded || len >= Self::ENOUGH {
            return Poll::Ready(());
        }
        self.yielded = true;
        // Woken while it runs, a task is queued behind the ready ones instead of in the LIFO
        // slot: exactly the turn this wants.
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for BatchedWrites<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for BatchedWrites<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        std::task::ready!(self.yield_once(cx, buf.len()));
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let len = bufs.iter().map(|b| b.len()).sum();
        std::task::ready!(self.yield_once(cx, len));
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let flushed = std::task::ready!(Pin::new(&mut self.io).poll_flush(cx));
        // The next flush yields again.
        self.yielded = false;
        Poll::Ready(flushed)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

impl<T: tonic::transport::server::Connected> tonic::transport::server::Connected
    for BatchedWrites<T>
{
    type ConnectInfo = T::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
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

    /// Counts its wake-ups.
    #[derive(Default)]
    struct Wakes(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for Wakes {
        fn wake(self: std::sync::Arc<Self>) {
            self.wake_by_ref();
        }
        fn wake_by_ref(self: &std::sync::Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    #[tokio::test]
    async fn the_first_small_write_of_each_flush_yields_once_and_large_ones_do_not() {
        use tokio::io::AsyncReadExt;
        let (ours, mut theirs) = tokio::io::duplex(1 << 20);
        let mut io = BatchedWrites::new(ours);
        let wakes = std::sync::Arc::new(Wakes::default());
        let waker = std::task::Waker::from(wakes.clone());
        let mut cx = Context::from_waker(&waker);
        let woken = || wakes.0.load(std::sync::atomic::Ordering::SeqCst);

        // Held back one turn, with the task woken for it; then written.
        assert!(Pin::new(&mut io).poll_write(&mut cx, b"abc").is_pending());
        assert_eq!(woken(), 1);
        assert!(matches!(
            Pin::new(&mut io).poll_write(&mut cx, b"abc"),
            Poll::Ready(Ok(3))
        ));
        // Later writes of the same flush go straight out.
        let more = [io::IoSlice::new(b"de"), io::IoSlice::new(b"f")];
        assert!(matches!(
            Pin::new(&mut io).poll_write_vectored(&mut cx, &more),
            Poll::Ready(Ok(3))
        ));
        assert!(Pin::new(&mut io).poll_flush(&mut cx).is_ready());
        // The next flush yields again.
        assert!(Pin::new(&mut io).poll_write(&mut cx, b"g").is_pending());
        assert_eq!(woken(), 2);
        assert!(Pin::new(&mut io).poll_write(&mut cx, b"g").is_ready());
        assert!(Pin::new(&mut io).poll_flush(&mut cx).is_ready());
        // A large write is not held back.
        let big = vec![b'x'; BatchedWrites::<()>::ENOUGH];
        assert!(matches!(
            Pin::new(&mut io).poll_write(&mut cx, &big),
            Poll::Ready(Ok(n)) if n == big.len()
        ));
        assert_eq!(woken(), 2);

        let mut got = vec![0; 7 + big.len()];
        theirs.read_exact(&mut got).await.unwrap();
        assert_eq!(&got[..7], b"abcdefg");
    }

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
