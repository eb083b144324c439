//! Where a reader of the log reads it from (`Source`): a published log
//! (C2SP tlog-tiles) over HTTP(S) — the gateway's `/log/`, a mirror — or a
//! folder laid out the same way (a mirror, or `STATE_DIR/archive`). Each
//! file is read under the most that such a file can hold, and a proof's
//! tiles are each fetched once. The verifier (`verify_answer`) and the
//! monitor (`monitor`) read through it.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, bail};
use toolgate_core::merkle::Hash;
use toolgate_core::tiles::{self, TileError, TileReader, WIDTH};
use toolgate_core::visible::visible;
use toolgate_mcp::body;

/// The largest file of the log read: a full entry bundle (below), the
/// largest of the files a log serves.
pub(super) const MAX_FILE: usize = MAX_ENTRY_BUNDLE;

/// The most of a checkpoint read. A note holds at most
/// `note::MAX_SIGNATURES` (100) signature lines, and the longest line, an
/// ML-DSA-65 signature, is about 4.5 KB of base64 with its name: 100 of those
/// and the checkpoint's three lines stay under 512 KiB. 1 MiB leaves room and
/// is still nothing to hold.
const MAX_CHECKPOINT: usize = 1 << 20;

/// A hash tile: at most `WIDTH` (256) hashes of 32 bytes.
const MAX_TILE: usize = WIDTH as usize * 32;

/// An entry bundle: at most `WIDTH` (256) entries, each a 2-byte length and
/// at most `u16::MAX` bytes (c2sp.org/tlog-tiles): 16,777,472 bytes.
const MAX_ENTRY_BUNDLE: usize = WIDTH as usize * (2 + u16::MAX as usize);

/// The most of an error's body quoted in the message that reports it.
const ERROR_HEAD: usize = 1024;

/// The most bytes a log's file at `rel` can hold, by what it is.
fn limit_of(rel: &str) -> (usize, &'static str) {
    if rel == "checkpoint" {
        (MAX_CHECKPOINT, "the log's checkpoint")
    } else if rel.starts_with("tile/entries/") {
        (MAX_ENTRY_BUNDLE, "an entry bundle")
    } else if rel.starts_with("tile/") {
        (MAX_TILE, "a hash tile")
    } else {
        (MAX_FILE, "a file of the log")
    }
}

/// Where the published log is read from.
pub enum Source {
    /// Over HTTP(S): `BASE/checkpoint`, `BASE/tile/…`.
    Http {
        /// The log's base URL, ending in `/`.
        base: reqwest::Url,
        /// The client.
        client: reqwest::Client,
        /// A bearer token, for a log served to approvers only.
        token: Option<String>,
    },
    /// A folder laid out the same way (a mirror, or `STATE_DIR/archive`).
    Dir(PathBuf),
}

impl Source {
    /// `http(s)://…` (a trailing `/` is added), or a folder.
    pub fn parse(location: &str, token: Option<String>) -> anyhow::Result<Self> {
        if location.starts_with("http://") || location.starts_with("https://") {
            let with_slash =
                if location.ends_with('/') { location.to_string() } else { format!("{location}/") };
            let base = reqwest::Url::parse(&with_slash)
                .with_context(|| format!("--log {location:?} is not a URL"))?;
            // No redirect is followed (see `get`): it would send the bearer
            // token, and the reader's trust in the place it named, elsewhere.
            let client = reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .redirect(reqwest::redirect::Policy::none())
                .build()?;
            return Ok(Source::Http { base, client, token });
        }
        let dir = PathBuf::from(location);
        if !dir.is_dir() {
            bail!("--log {location:?} is neither an http(s) URL nor a folder");
        }
        Ok(Source::Dir(dir))
    }

    /// A proof over the log's tree, from the tiles it reads: each fetched
    /// once (`tiles::tiles_read` names them), then the proof run on them.
    pub async fn proof(
        &self,
        proof: impl Fn(&mut TileReader<'_, TileError>) -> Result<Vec<Hash>, TileError>,
    ) -> anyhow::Result<Vec<Hash>> {
        let mut read: HashMap<(u8, u64, u64), Vec<Hash>> = HashMap::new();
        for (level, tile, width) in tiles::tiles_read(&proof)? {
            let bytes = self.get(&tiles::tile_path(level, tile, width)).await?;
            read.insert((level, tile, width), tiles::read_tile(&bytes, width)?);
        }
        Ok(proof(&mut |l, t, w| {
            read.get(&(l, t, w))
                .cloned()
                .ok_or_else(|| TileError::Malformed(format!("tile {l}/{t} was not read")))
        })?)
    }

    /// The log's file at `rel` (`checkpoint`, `tile/…`), refused once it
    /// passes what such a file can hold (`limit_of`): a log, or whatever
    /// answers in its place, decides what it sends.
    pub async fn get(&self, rel: &str) -> anyhow::Result<Vec<u8>> {
        let (limit, what) = limit_of(rel);
        match self {
            Source::Dir(dir) => {
                use std::io::Read as _;
                let path = dir.join(rel);
                let file = std::fs::File::open(&path)
                    .with_context(|| format!("reading {}", path.display()))?;
                let mut bytes = Vec::new();
                file.take(limit as u64 + 1)
                    .read_to_end(&mut bytes)
                    .with_context(|| format!("reading {}", path.display()))?;
                if bytes.len() > limit {
                    bail!(
                        "{} is longer than the {limit} bytes {what} can hold: it is not the log's",
                        path.display()
                    );
                }
                Ok(bytes)
            }
            Source::Http { base, client, token } => {
                let url = base.join(rel)?;
                let mut request = client.get(url.clone());
                if let Some(t) = token {
                    request = request.bearer_auth(t);
                }
                let response = request.send().await.with_context(|| format!("fetching {url}"))?;
                let status = response.status();
                if status.is_redirection() {
                    // Not followed: the token would go with it, to a place the
                    // reader did not name. Same-origin redirects are refused
                    // too: a log serves its files where the spec says.
                    let to = body::location(&response);
                    bail!(
                        "{url} answered {status}, a redirect to {}, which is not followed; if that is the log, give it with --log",
                        visible(&to)
                    );
                }
                if !status.is_success() {
                    let text = body::read_head(response, ERROR_HEAD).await;
                    let text: String = visible(text.trim()).chars().take(300).collect();
                    if matches!(status.as_u16(), 401 | 403) {
                        let fix = match token {
                            None => {
                                "this log is served to approvers only (`[receipts] log_access`): set TOOLGATE_LOG_TOKEN to an approver's token"
                            }
                            Some(_) => {
                                "the token in TOOLGATE_LOG_TOKEN was not accepted: give an \
                                    approver's (or an admin's, for receipts logged in the clear)"
                            }
                        };
                        return Err(
                            Refused(format!("{url} answered {status}: {text}; {fix}")).into()
                        );
                    }
                    bail!("{url} answered {status}: {text}");
                }
                let what = format!("{what} at {url}");
                Ok(body::read_limited(response, limit, &what).await?)
            }
        }
    }
}

/// The log refused this reader (401, 403): said at once, with the
/// variable that carries a token, and not waited out.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Refused(String);
