//! A raw WebSocket client over TCP, for agents that break the rules: it upgrades with the headers it is given,
//! writes frames, and reads nothing it is not asked to. Its frames are masked with a key of zeros (any key is
//! allowed), so a payload is written as it is, from a buffer shared by every socket.

use std::net::SocketAddr;

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

pub(crate) const TEXT: u8 = 0x1;
pub(crate) const PING: u8 = 0x9;

/// The server's answer to an upgrade: its status and head, and the socket if it switched protocols.
pub(crate) struct Upgraded {
    pub(crate) status: u16,
    pub(crate) head: String,
    pub(crate) socket: Option<RawSocket>,
}

pub(crate) struct RawSocket {
    stream: TcpStream,
}

/// The address of a `ws://ADDR/path` url.
pub(crate) fn addr_of(url: &str) -> SocketAddr {
    let rest = url.strip_prefix("ws://").expect("a ws:// url");
    rest.split('/').next().unwrap().parse().unwrap()
}

/// Ask `url` (`ws://ADDR/path`) for a WebSocket, with an `Origin` if given.
pub(crate) async fn upgrade(url: &str, origin: Option<&str>) -> Upgraded {
    let addr = addr_of(url);
    let path = &url["ws://".len() + url["ws://".len()..].find('/').unwrap()..];
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let mut head = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
    );
    if let Some(origin) = origin {
        head.push_str(&format!("Origin: {origin}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    // Byte by byte: nothing past the head is read (the frames that follow are the caller's).
    let mut answer = Vec::new();
    while !answer.ends_with(b"\r\n\r\n") {
        let byte = stream.read_u8().await.expect("an answer to the upgrade");
        answer.push(byte);
    }
    let head = String::from_utf8(answer).unwrap().to_ascii_lowercase();
    let status = head[9..12].parse().unwrap();
    let socket = (status == 101).then_some(RawSocket { stream });
    Upgraded {
        status,
        head,
        socket,
    }
}

impl RawSocket {
    /// Write one frame (final, masked with zeros) of `opcode`.
    pub(crate) async fn frame(&mut self, opcode: u8, payload: &[u8]) -> std::io::Result<()> {
        let mut header = vec![0x80 | opcode];
        match payload.len() {
            len @ 0..=125 => header.push(0x80 | len as u8),
            len @ 126..=0xFFFF => {
                header.push(0x80 | 126);
                header.extend_from_slice(&(len as u16).to_be_bytes());
            }
            len => {
                header.push(0x80 | 127);
                header.extend_from_slice(&(len as u64).to_be_bytes());
            }
        }
        header.extend_from_slice(&[0; 4]);
        self.stream.write_all(&header).await?;
        self.stream.write_all(payload).await
    }

    pub(crate) async fn text(&mut self, text: &str) -> std::io::Result<()> {
        self.frame(TEXT, text.as_bytes()).await
    }
}
