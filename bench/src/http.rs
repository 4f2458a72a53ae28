//! A minimal HTTP/1.1 keep-alive client for the load generator. reqwest on the same two cores
//! as the daemon took a large share of the CPU the daemon needed; this does only what the
//! benchmarks send (small requests, `Content-Length` or chunked answers), as `wrk` does.

use tokio::{
    io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader},
    net::TcpStream,
};

pub struct Connection {
    stream: BufReader<TcpStream>,
    host: String,
    request: Vec<u8>,
}

fn invalid(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned())
}

impl Connection {
    /// Connects to `base` (`http://host:port`).
    pub async fn open(base: &str) -> std::io::Result<Connection> {
        let host = base.trim_start_matches("http://").trim_end_matches('/').to_owned();
        let stream = TcpStream::connect(&host).await?;
        stream.set_nodelay(true)?;
        Ok(Connection {
            stream: BufReader::with_capacity(16 * 1024, stream),
            host,
            request: Vec::with_capacity(1024),
        })
    }

    /// Sends a request and reads the whole answer: its status and body.
    pub async fn send(
        &mut self,
        method: &str,
        path: &str,
        token: Option<&str>,
        json: Option<&[u8]>,
    ) -> std::io::Result<(u16, Vec<u8>)> {
        let bearer = token.map(|t| format!("Bearer {t}"));
        let headers: Vec<(&str, &str)> = bearer.iter().map(|b| ("Authorization", b.as_str())).collect();
        self.request(method, path, &headers, json.map(|body| ("application/json", body))).await
    }

    /// Sends a form (`application/x-www-form-urlencoded`) with `headers`, as a provider's
    /// callback does.
    pub async fn send_form(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        form: &[u8],
    ) -> std::io::Result<(u16, Vec<u8>)> {
        self.request(method, path, headers, Some(("application/x-www-form-urlencoded", form))).await
    }

    async fn request(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<(&str, &[u8])>,
    ) -> std::io::Result<(u16, Vec<u8>)> {
        use std::io::Write;
        self.request.clear();
        write!(self.request, "{method} {path} HTTP/1.1\r\nHost: {}\r\n", self.host)?;
        for (name, value) in headers {
            write!(self.request, "{name}: {value}\r\n")?;
        }
        match body {
            Some((content_type, body)) => {
                write!(
                    self.request,
                    "Content-Type: {content_type}\r\nContent-Length: {}\r\n\r\n",
                    body.len()
                )?;
                self.request.extend_from_slice(body);
            }
            None => self.request.extend_from_slice(b"\r\n"),
        }
        self.stream.get_mut().write_all(&self.request).await?;

        let mut line = String::new();
        self.stream.read_line(&mut line).await?;
        let status = line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse::<u16>().ok())
            .ok_or_else(|| invalid("status line"))?;
        let (mut length, mut chunked) = (0usize, false);
        loop {
            line.clear();
            if self.stream.read_line(&mut line).await? == 0 {
                return Err(invalid("connection closed in the headers"));
            }
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().map_err(|_| invalid("content-length"))?;
                } else if name.eq_ignore_ascii_case("transfer-encoding")
                    && value.trim().eq_ignore_ascii_case("chunked")
                {
                    chunked = true;
                }
            }
        }
        let mut body = Vec::new();
        if chunked {
            loop {
                line.clear();
                self.stream.read_line(&mut line).await?;
                let size = usize::from_str_radix(line.trim(), 16).map_err(|_| invalid("chunk size"))?;
                let start = body.len();
                body.resize(start + size + 2, 0);
                self.stream.read_exact(&mut body[start..]).await?;
                body.truncate(start + size);
                if size == 0 {
                    break;
                }
            }
        } else {
            body.resize(length, 0);
            self.stream.read_exact(&mut body).await?;
        }
        Ok((status, body))
    }
}
