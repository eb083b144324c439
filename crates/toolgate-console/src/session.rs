//! Console sessions: a caller's bearer token (or a one-time sign-in link)
//! is exchanged once for a session cookie, so the token never sits in a
//! browser. Sessions live in this process only and end at sign-out, at
//! their deadline, when the access token that opened one is refused (its
//! expiry), or when the gateway stops — revocable on the server, not just
//! forgotten by the browser. Each carries its own CSRF token, which
//! every state-changing form must send back (`extract::SignedForm`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::http::{HeaderMap, header};
use toolgate_core::{Caller, Entropy};
use toolgate_gateway::config::{ADMIN_ROLE, APPROVER_ROLE};
use toolgate_gateway::gateway::Gateway;

/// The session cookie's name.
pub(crate) const COOKIE: &str = "toolgate_session";
/// The sign-in form's own cookie (login CSRF: double submit).
pub(crate) const FORM_COOKIE: &str = "toolgate_signin";
/// How long a sign-in link (printed by `toolgate demo --serve`) stays valid.
const LINK_TTL_MS: i64 = 10 * 60 * 1000;
/// Live sessions at most: past it the one nearest its end is closed.
const MAX_SESSIONS: usize = 10_000;

/// A signed-in person: who, the form token, until when.
#[derive(Clone)]
pub(crate) struct Session {
    pub(crate) caller: Arc<Caller>,
    pub(crate) csrf: String,
    pub(crate) expires_ms: i64,
}

impl Session {
    pub(crate) fn approver(&self) -> bool {
        self.caller.has_role(APPROVER_ROLE)
    }

    pub(crate) fn admin(&self) -> bool {
        self.caller.has_role(ADMIN_ROLE)
    }
}

/// Whether `caller` may use the console at all.
pub(crate) fn may_sign_in(caller: &Caller) -> bool {
    caller.has_role(APPROVER_ROLE) || caller.has_role(ADMIN_ROLE)
}

/// The console's sessions and unredeemed sign-in links.
#[derive(Default)]
pub(crate) struct Sessions {
    live: Mutex<HashMap<String, Session>>,
    links: Mutex<HashMap<String, (Arc<Caller>, i64)>>,
}

impl Sessions {
    /// Opens a session for `caller`; returns its id (the cookie's value).
    pub(crate) fn open(&self, caller: Arc<Caller>, now_ms: i64, ttl_ms: i64, entropy: &dyn Entropy) -> (String, Session) {
        let id = entropy.id("tgs_");
        let session = Session { caller, csrf: entropy.id("csrf_"), expires_ms: now_ms + ttl_ms };
        let mut live = lock(&self.live);
        live.retain(|_, s| s.expires_ms > now_ms);
        if live.len() >= MAX_SESSIONS
            && let Some(oldest) = live.iter().min_by_key(|(_, s)| s.expires_ms).map(|(k, _)| k.clone())
        {
            live.remove(&oldest);
        }
        live.insert(id.clone(), session.clone());
        (id, session)
    }

    /// The live session `id`, if it has not ended.
    pub(crate) fn get(&self, id: &str, now_ms: i64) -> Option<Session> {
        let mut live = lock(&self.live);
        match live.get(id) {
            Some(s) if s.expires_ms > now_ms => Some(s.clone()),
            Some(_) => {
                live.remove(id);
                None
            }
            None => None,
        }
    }

    /// Ends session `id` (sign-out).
    pub(crate) fn close(&self, id: &str) {
        lock(&self.live).remove(id);
    }

    /// A one-time sign-in code for `caller`, valid for ten minutes.
    pub(crate) fn link(&self, caller: Arc<Caller>, now_ms: i64, entropy: &dyn Entropy) -> String {
        let code = entropy.id("tgl_");
        let mut links = lock(&self.links);
        links.retain(|_, (_, until)| *until > now_ms);
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
    headers.get_all(header::COOKIE).iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(';')).find_map(|pair| {
        let (k, v) = pair.trim().split_once('=')?;
        (k == name).then_some(v)
    })
}

/// A `Set-Cookie` value: HttpOnly, SameSite=Strict, scoped to `/console`,
/// `Secure` where the gateway is reached over TLS; `max_age_s` 0 clears it.
pub(crate) fn set_cookie(gw: &Gateway, name: &str, value: &str, max_age_s: u64) -> String {
    let listen = gw.config.console.listen.unwrap_or(gw.config.gateway.listen);
    let tls = gw.config.tls.cert_file.is_some();
    let secure = gw.config.console.secure_cookies.unwrap_or(tls || !listen.ip().is_loopback());
    format!("{name}={value}; Path=/console; HttpOnly; SameSite=Strict; Max-Age={max_age_s}{}", if secure { "; Secure" } else { "" })
}

/// Two secrets compared in constant time.
pub(crate) fn same_secret(a: &str, b: &str) -> bool {
    // An empty value is no secret: a form and a cookie both left empty match nothing.
    !a.is_empty() && a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolgate_core::SeededEntropy;

    fn rng() -> SeededEntropy {
        SeededEntropy::new([7; 32])
    }

    fn caller(roles: &[&str]) -> Arc<Caller> {
        Arc::new(Caller { name: "dana".into(), subject: "dana@atlas.example".into(), tenant: "atlas".into(), roles: roles.iter().map(|r| r.to_string()).collect() })
    }

    #[test]
    fn a_session_ends_at_its_deadline_and_at_sign_out() {
        let (s, e) = (Sessions::default(), rng());
        let (id, opened) = s.open(caller(&["approver"]), 1_000, 500, &e);
        assert!(id.starts_with("tgs_") && opened.csrf.starts_with("csrf_") && opened.csrf != id);
        assert!(s.get(&id, 1_499).is_some());
        assert!(s.get(&id, 1_500).is_none(), "alive at its deadline");
        assert!(s.get(&id, 1_000).is_none(), "an ended session came back");
        let (id, _) = s.open(caller(&["approver"]), 1_000, 500, &e);
        s.close(&id);
        assert!(s.get(&id, 1_001).is_none());
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
    fn sessions_are_bounded() {
        let (s, e) = (Sessions::default(), rng());
        let (first, _) = s.open(caller(&["admin"]), 0, 10, &e);
        for i in 0..MAX_SESSIONS {
            s.open(caller(&["admin"]), 0, 20 + i as i64, &e);
        }
        assert_eq!(lock(&s.live).len(), MAX_SESSIONS);
        assert!(s.get(&first, 1).is_none(), "the session nearest its end is the one closed");
    }

    #[test]
    fn only_approvers_and_admins_may_sign_in() {
        assert!(may_sign_in(&caller(&["approver"])) && may_sign_in(&caller(&["admin"])));
        assert!(!may_sign_in(&caller(&["agent"])) && !may_sign_in(&caller(&[])));
    }

    #[test]
    fn cookies_are_read_by_exact_name_and_secrets_compared_whole() {
        let mut h = HeaderMap::new();
        h.append(header::COOKIE, "a=1; toolgate_session_x=no; toolgate_session=tgs_1".parse().unwrap());
        h.append(header::COOKIE, "other=2".parse().unwrap());
        assert_eq!(cookie(&h, COOKIE), Some("tgs_1"));
        assert_eq!(cookie(&h, "other"), Some("2"));
        assert_eq!(cookie(&h, "missing"), None);
        assert!(same_secret("csrf_ab", "csrf_ab"));
        assert!(!same_secret("csrf_ab", "csrf_a") && !same_secret("csrf_ab", "csrf_ac") && !same_secret("", "x") && !same_secret("", ""));
    }
}
