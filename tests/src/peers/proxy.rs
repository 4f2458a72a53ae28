//! A TCP proxy on loopback that can cut the network between a client and the daemon: while cut,
//! open connections go silent (no bytes, no close, as a dropped Wi-Fi or a dead NAT entry would
//! leave them) and new ones are closed at once; restored, new connections pass again. It counts
//! the connections it accepts.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
};

use tokio::{
    net::{TcpListener, TcpStream},
    sync::watch,
};

pub struct CutProxy {
    pub addr: SocketAddr,
    up: watch::Sender<bool>,
    accepted: Arc<AtomicUsize>,
}

impl CutProxy {
    /// Forwards every connection to `target`.
    pub async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the proxy");
        let addr = listener.local_addr().expect("the proxy's address");
        let (up, watching) = watch::channel(true);
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(forward(client, target, watching.clone()));
            }
        });
        Self { addr, up, accepted }
    }

    /// The connections it has accepted so far.
    pub fn connections(&self) -> usize {
        self.accepted.load(Ordering::Relaxed)
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Silences the open connections and refuses new ones.
    pub fn cut(&self) {
        self.up.send_replace(false);
    }

    pub fn restore(&self) {
        self.up.send_replace(true);
    }
}

async fn forward(client: TcpStream, target: SocketAddr, mut up: watch::Receiver<bool>) {
    if !*up.borrow() {
        return;
    }
    let Ok(server) = TcpStream::connect(target).await else { return };
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let copy = async {
        tokio::select! {
            _ = tokio::io::copy(&mut client_read, &mut server_write) => {}
            _ = tokio::io::copy(&mut server_read, &mut client_write) => {}
        }
    };
    let cut = tokio::select! {
        _ = copy => false,
        cut = up.wait_for(|up| !*up) => cut.is_ok(),
    };
    if cut {
        // Silent until the network is back; the sockets close only then.
        let _ = up.wait_for(|up| *up).await.map(|_| ());
    }
}
