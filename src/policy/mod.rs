//! Pure policy: which pods a drain acts on and how (filters), in what order (plan), and the label
//! selectors the configuration's rules use. No API call anywhere below this module.

pub mod filters;
pub mod plan;
pub mod selector;
