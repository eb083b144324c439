//! The Atlas world, generated from one fixed seed: the same bytes on every
//! machine, no downloads.

pub mod domain;
pub mod manuals;
pub mod parts;
pub mod rng;
pub mod support;
pub mod tickets;

use crate::search::Index;
pub use manuals::Passage;
pub use parts::Part;
pub use tickets::{Status, Ticket};

/// The seed of the published data set. Changing it changes every ticket.
pub const SEED: u64 = 0x00A7_1A50_2026;

pub struct Dataset {
    pub tickets: Vec<Ticket>,
    pub parts: Vec<Part>,
    pub passages: Vec<Passage>,
    /// BM25 over ticket symptoms, indexed like `tickets`.
    pub symptom_index: Index,
    /// BM25 over passage section and text, indexed like `passages`.
    pub passage_index: Index,
}

impl Dataset {
    pub fn generate(seed: u64) -> Self {
        let mut rng = rng::Rng::new(seed);
        let parts = parts::generate(&mut rng.fork("parts"));
        let tickets = tickets::generate(&mut rng.fork("tickets"), &parts);
        let passages = manuals::generate(&mut rng.fork("manuals"));
        let symptom_index = Index::build(tickets.iter().map(|t| t.symptom.as_str()));
        let passage_texts: Vec<String> =
            passages.iter().map(|p| format!("{} {}", p.section, p.text)).collect();
        let passage_index = Index::build(passage_texts.iter().map(String::as_str));
        Self { tickets, parts, passages, symptom_index, passage_index }
    }

    pub fn ticket(&self, ticket_id: &str) -> Option<&Ticket> {
        let n: usize = ticket_id.strip_prefix("SR-")?.parse().ok()?;
        self.tickets
            .get(n.checked_sub(tickets::FIRST_TICKET_NO)?)
            .filter(|t| t.ticket_id == ticket_id)
    }

    pub fn part(&self, part_no: &str) -> Option<&Part> {
        self.parts.iter().find(|p| p.part_no == part_no)
    }
}
