//! Console sessions: a caller's bearer token (or a one-time sign-in link)
//! is exchanged once for a session cookie, so the token never sits in a
//! browser. Sessions live in the ledger, so behind a load balancer any
//! replica serves any approver: the ledger keeps only the SHA-256 of a
//! session's id, never the id, so reading it signs nobody in. A session
//! ends at sign-out (on every replica at once; "sign out everywhere" ends
//! all of the person's), at its deadline, and no later than the access
//! token that opened it. Each carries its own CSRF token, derived from the
//! session's id (so any replica can check it and the ledger holds none),
//! which every state-changing form must send back (`extract::SignedForm`).
//! One-time sign-in links stay in the memory of the replica that made them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::http::{HeaderMap, header};
use toolgate_core::{Caller, Entropy};
use toolgate_gateway::config::{ADMIN_ROLE, APPROVER_ROLE};
use toolgate_gateway::gateway::Gateway;
use toolgate_ledger::StoredSession;

use crate::Console;

/// The session cookie's name.
pub(crate) const COOKIE: &str = "toolgate_session";
/// The sign-in form's own cookie (login CSRF: double submit).
pub(crate) const FORM_COOKIE: &str = "toolgate_signin";
/// How long a sign-in link (printed by `toolgate demo --serve`) stays valid.
const LINK_TTL_MS: i64 = 10 * 60 * 1000;
/// Unredeemed sign-in links at most: past it the one nearest its end goes.
const MAX_LINKS: usize = 10_000;

/// A signed-in person: who, and the form token.
#[derive(Clone)]
pub(crate) struct Session {
    pub(crate) caller: Arc<Caller>,
    pub(crate) csrf: String,
}

impl Session {
    pub(crate) fn approver(&self) -> bool {
        self.caller.has_role(APPROVER_ROLE)
    }

    pub(crate) fn admin(&self) -> bool {
        self.caller.has_role(ADMIN_ROLE)
    }
}

/// Whether `caller` may use the console at all: an approver or an admin
/// for every screen; anyone else only where a server acts for each person
/// with their own account (`mode = "oauth"`), to connect theirs.
pub(crate) fn may_sign_in(caller: &Caller, connections: bool) -> bool {
    has_a_role(caller) || connections
}

/// An approver or an admin: every screen is theirs to see.
pub(crate) fn has_a_role(caller: &Caller) -> bool {
    caller.has_role(APPROVER_ROLE) || caller.has_role(ADMIN_ROLE)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What the ledger keys a session by: its id's SHA-256.
fn id_sha256(id: &str) -> String {
    hex(aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, id.as_bytes()).as_ref())
}

/// A session's CSRF token: a one-way function of its id, so every replica
/// derives the same one and knowing it reveals nothing of the id.
fn csrf_of(id: &str) -> String {
    let tag = aws_lc_rs::digest::digest(
        &aws_lc_rs::digest::SHA256,
        format!("toolgate console csrf\n{id}").as_bytes(),
    );
    format!("csrf_{}", &hex(tag.as_ref())[..32])
}

/// Opens a session for `caller` until `now_ms + ttl_ms`, in the ledger;
/// returns its id (the cookie's value).
pub(crate) async fn open(
    gw: &Gateway,
    caller: Arc<Caller>,
    now_ms: i64,
    ttl_ms: i64,
) -> Result<(String, Session), toolgate_ledger::LedgerError> {
    let id = gw.entropy.id("tgs_");
    let stored = StoredSession {
        id_sha256: id_sha256(&id),
        tenant: caller.tenant.clone(),
        subject: caller.subject.clone(),
        caller: serde_json::to_string(&*caller).expect("a caller serialises"),
        created_ms: now_ms,
        expires_ms: now_ms + ttl_ms,
    };
    gw.ledger.open_session(stored).await?;
    let session = Session { caller, csrf: csrf_of(&id) };
    Ok((id, session))
}

/// The live session `id`, if it has not ended (a ledger that cannot be
/// read now signs nobody in: the person is asked to sign in again).
pub(crate) async fn get(gw: &Gateway, id: &str, now_ms: i64) -> Option<Session> {
    let stored = match gw.ledger.session(&id_sha256(id), now_ms).await {
        Ok(stored) => stored?,
        Err(e) => {
            tracing::warn!(target: "toolgate::console", error = %e, "cannot read a console session from the ledger");
            return None;
        }
    };
    let caller: Caller = serde_json::from_str(&stored.caller).ok()?;
    Some(Session { caller: Arc::new(caller), csrf: csrf_of(id) })
}

/// Ends session `id` (sign-out), or with `everywhere` every session of its
/// person: on every replica at once.
pub(crate) async fn close(
    gw: &Gateway,
    id: &str,
    caller: &Caller,
    everywhere: bool,
) -> Result<u64, toolgate_ledger::LedgerError> {
    if everywhere {
        gw.ledger.end_sessions_of(&caller.tenant, &caller.subject).await
    } else {
        gw.ledger.end_session(&id_sha256(id)).await.map(u64::from)
    }
}

/// The unredeemed sign-in links of this replica.
#[derive(Default)]
pub(crate) struct Sessions {
    links: Mutex<HashMap<String, (Arc<Caller>, i64)>>,
}

impl Sessions {
    /// A one-time sign-in code for `caller`, valid for ten minutes.
    pub(crate) fn link(&self, caller: Arc<Caller>, now_ms: i64, entropy: &dyn Entropy) -> String {
        let code = entropy.id("tgl_");
        let mut links = lock(&self.links);
        links.retain(|_, (_, until)| *until > now_ms);
        if links.len() >= MAX_LINKS
            && let Some(oldest) =
                links.iter().min_by_key(|(_, (_, until))| *until).map(|(k, _)| k.clone())
        {
            links.remove(&oldest);
        }
        links.insert(code.clone(), (caller, now_ms + LINK_TTL_MS));
        code
    }

    /// The caller of sign-in code `code`, once: it is spent by this.
    pub(crate) fn redeem(&self, code: &str, now_ms: i64) -> Option<Arc<Caller>> {
        match lock(&self.links).remove(code) {
            Some((caller, until)) if until > now_ms => Some(caller),
            _ => None,
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A cookie's value from the request's `Cookie` headers.
pub(crate) fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| {
            let (k, v) = pair.trim().split_once('=')?;
            (k == name).then_some(v)
        })
}

/// A `Set-Cookie` value: HttpOnly, SameSite=Strict, scoped to `/console`,
/// `Secure` where the gateway is reached over TLS; `max_age_s` 0 clears it.
pub(crate) fn set_cookie(console: &Console, name: &str, value: &str, max_age_s: u64) -> String {
    let gw = &console.gw;
    let listen = console.config.listen.unwrap_or(gw.config().gateway.listen);
    let tls = gw.config().tls.cert_file.is_some();
    let secure = console.config.secure_cookies.unwrap_or(tls || !listen.ip().is_loopback());
    format!(
        "{name}={value}; Path=/console; HttpOnly; SameSite=Strict; Max-Age={max_age_s}{}",
        if secure { "; Secure" } else { "" }
    )
}

/// Two secrets compared in constant time.
pub(crate) fn same_secret(a: &str, b: &str) -> bool {
    // An empty value is no secret: a form and a cookie both left empty match nothing.
    !a.is_empty()
        && a.len() == b.len()
        && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolgate_core::SeededEntropy;

    fn rng() -> SeededEntropy {
        SeededEntropy::new([7; 32])
    }

    fn caller(roles: &[&str]) -> Arc<Caller> {
        Arc::new(Caller {
            name: "dana".into(),
            subject: "dana@atlas.example".into(),
            tenant: "atlas".into(),
            roles: roles.iter().map(|r| r.to_string()).collect(),
        })
    }

    #[test]
    fn the_ledger_keeps_a_hash_of_the_id_and_the_csrf_token_is_derived_from_it() {
        let (a, b) = ("tgs_one", "tgs_two");
        assert_eq!(id_sha256(a).len(), 64);
        assert_ne!(id_sha256(a), id_sha256(b));
        assert!(!id_sha256(a).contains("one"));
        assert_eq!(csrf_of(a), csrf_of(a), "every replica derives the same token");
        assert!(
            csrf_of(a).starts_with("csrf_") && csrf_of(a).len() == 37 && csrf_of(a) != csrf_of(b)
        );
        assert_ne!(&csrf_of(a)[5..], &id_sha256(a)[..32], "the token is not the ledger's key");
    }

    #[test]
    fn a_sign_in_link_is_spent_once_and_expires() {
        let (s, e) = (Sessions::default(), rng());
        let code = s.link(caller(&["approver"]), 0, &e);
        assert_eq!(s.redeem(&code, 1).map(|c| c.name.clone()).as_deref(), Some("dana"));
        assert!(s.redeem(&code, 2).is_none(), "a link signed in twice");
        let late = s.link(caller(&["approver"]), 0, &e);
        assert!(s.redeem(&late, LINK_TTL_MS).is_none(), "an expired link signed in");
        assert!(s.redeem("tgl_made_up", 0).is_none());
    }

    #[test]
    fn links_are_bounded() {
        let (s, e) = (Sessions::default(), rng());
        let first = s.link(caller(&["admin"]), 0, &e);
        for _ in 0..MAX_LINKS {
            s.link(caller(&["admin"]), 1, &e);
        }
        assert_eq!(lock(&s.links).len(), MAX_LINKS);
        assert!(s.redeem(&first, 2).is_none(), "the link nearest its end is the one dropped");
    }

    #[test]
    fn only_approvers_and_admins_may_sign_in_unless_people_connect_accounts_here() {
        assert!(
            may_sign_in(&caller(&["approver"]), false) && may_sign_in(&caller(&["admin"]), false)
        );
        assert!(!may_sign_in(&caller(&["agent"]), false) && !may_sign_in(&caller(&[]), false));
        assert!(may_sign_in(&caller(&[]), true), "a person connects their own account");
    }

    #[test]
    fn cookies_are_read_by_exact_name_and_secrets_compared_whole() {
        let mut h = HeaderMap::new();
        h.append(
            header::COOKIE,
            "a=1; toolgate_session_x=no; toolgate_session=tgs_1".parse().unwrap(),
        );
        h.append(header::COOKIE, "other=2".parse().unwrap());
        assert_eq!(cookie(&h, COOKIE), Some("tgs_1"));
        assert_eq!(cookie(&h, "other"), Some("2"));
        assert_eq!(cookie(&h, "missing"), None);
        assert!(same_secret("csrf_ab", "csrf_ab"));
        assert!(
            !same_secret("csrf_ab", "csrf_a")
                && !same_secret("csrf_ab", "csrf_ac")
                && !same_secret("", "x")
                && !same_secret("", "")
        );
    }
}
