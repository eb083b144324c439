//! The support desk's customers (seed `001_…`): a small fixed list, not
//! generated, because the tests and the demo name these customers directly.
//! Some names are built to collide on purpose — "North Region" matches two
//! accounts — so that a caller has to clarify instead of picking one.

pub struct Customer {
    /// Opaque and stable: callers get it from a search, never invent it.
    pub customer_id: &'static str,
    pub display_name: &'static str,
}

const fn c(customer_id: &'static str, display_name: &'static str) -> Customer {
    Customer { customer_id, display_name }
}

/// In the order searches return them.
pub const CUSTOMERS: [Customer; 8] = [
    c("cust_training_17", "North Region Training Account"),
    c("cust_training_18", "North Regional Training Accounts"),
    c("cust_northgate_14", "Northgate Veterinary Hospital"),
    c("cust_harbor_02", "Harbor Freight Logistics"),
    c("cust_harborview_21", "Harborview Bakery"),
    c("cust_southfield_05", "Southfield Clinic"),
    c("cust_lakeside_09", "Lakeside Dental Group"),
    c("cust_meridian_11", "Meridian Print Works"),
];

pub fn customer(customer_id: &str) -> Option<&'static Customer> {
    CUSTOMERS.iter().find(|c| c.customer_id == customer_id)
}

/// Lower-cased alphanumeric words: how both names and queries are compared.
pub fn words(text: &str) -> Vec<String> {
    text.split(|ch: char| !ch.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// Customers whose name has, for every query word, a word beginning with it.
/// Prefixes rather than whole words, so a partial or singular name still
/// finds the account — and near-namesakes all surface together.
pub fn search(query_words: &[String]) -> Vec<&'static Customer> {
    CUSTOMERS
        .iter()
        .filter(|c| {
            let name = words(c.display_name);
            query_words.iter().all(|q| name.iter().any(|w| w.starts_with(q.as_str())))
        })
        .collect()
}
