//! Quorum approval (`interrupt-profiles.md` §openwop-interrupt-quorum): an approval that
//! needs `requiredApprovals` accepts, decided from the votes in `spec.answers`.
//!
//! One fold, [`tally`], is the whole rule, and everyone uses it: the operator starts a worker
//! only once the votes decide ([`decided`]; a partial vote starts nothing, so the run stays
//! `waiting-approval` without a pod), the REST surface refuses a vote once they decide, and the
//! worker records the votes and the decision.
//!
//! The rule (documented, as the profile requires):
//! * a vote is an answer to the interrupt whose action the approval offers (an untrusted
//!   answer never approves: its accept does not count); its voter is `resumeValue.voter`,
//!   else who answered;
//! * the last vote of each voter is the one that counts (a voter may change their mind; a
//!   repeated vote is idempotent);
//! * the votes reject once `rejectionPolicy` says so — `single-veto` (default): one reject;
//!   `majority`: ⌊required/2⌋+1 rejects — and rejection is looked at first, so a quorum can
//!   never be granted by votes that also reject it;
//! * else they accept once accepts (any offered action but `reject`) reach `requiredApprovals`;
//! * else the approval keeps waiting.

use std::collections::BTreeMap;

use serde_json::Value;

use super::snapshot::{Answer, VOTER};
use super::status::{DEFAULT_APPROVAL_ACTIONS, PendingInterrupt};
use crate::envelope::ContentTrust;

/// The profile a host that honours `requiredApprovals` > 1 claims (discovery
/// `capabilities.auth.profiles`).
pub const QUORUM_PROFILE: &str = "openwop-interrupt-quorum";

/// Most approvals a quorum may require (the gate config schema's `requiredApprovals`
/// maximum).
pub const MAX_REQUIRED_APPROVALS: u32 = 100;

/// How rejections end a quorum approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RejectionPolicy {
    /// One reject rejects.
    #[default]
    SingleVeto,
    /// A majority of the required approvals (⌊required/2⌋+1) rejects.
    Majority,
}

impl RejectionPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            RejectionPolicy::SingleVeto => "single-veto",
            RejectionPolicy::Majority => "majority",
        }
    }

    /// The spec's spelling (`single-veto`, `majority`); anything else is the default.
    pub fn parse(s: &str) -> RejectionPolicy {
        match s {
            "majority" => RejectionPolicy::Majority,
            _ => RejectionPolicy::SingleVeto,
        }
    }
}

/// What an approval needs to be decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quorum {
    /// Accepts that grant it (≥ 1).
    pub required: u32,
    pub policy: RejectionPolicy,
}

impl Default for Quorum {
    fn default() -> Self {
        Quorum {
            required: 1,
            policy: RejectionPolicy::SingleVeto,
        }
    }
}

impl Quorum {
    /// The quorum an approval's data (`requiredApprovals`, `rejectionPolicy`) asks for.
    pub fn of_data(data: &Value) -> Quorum {
        Quorum {
            required: data
                .get("requiredApprovals")
                .and_then(Value::as_u64)
                .map_or(1, |n| n.clamp(1, u64::from(u32::MAX)) as u32),
            policy: data
                .get("rejectionPolicy")
                .and_then(Value::as_str)
                .map(RejectionPolicy::parse)
                .unwrap_or_default(),
        }
    }

    /// Whether more than one approval is needed (a plain approval is decided by its answer).
    pub fn is_quorum(&self) -> bool {
        self.required > 1
    }

    /// Rejects that reject.
    pub fn rejections_needed(&self) -> u32 {
        match self.policy {
            RejectionPolicy::SingleVeto => 1,
            RejectionPolicy::Majority => self.required / 2 + 1,
        }
    }
}

impl PendingInterrupt {
    /// The quorum of an approval that needs more than one accept.
    pub fn quorum(&self) -> Option<Quorum> {
        let required = self.required_approvals.filter(|n| *n > 1)?;
        Some(Quorum {
            required,
            policy: RejectionPolicy::parse(self.rejection_policy.as_deref().unwrap_or_default()),
        })
    }
}

/// How the votes decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Accepted,
    Rejected,
}

/// One voter's vote: their last answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Vote<'a> {
    pub voter: String,
    pub answer: &'a Answer,
    /// `false`: the vote rejects.
    pub accept: bool,
}

/// The votes of an approval and what they decide.
#[derive(Debug, Clone, PartialEq)]
pub struct Tally<'a> {
    /// The counted votes, one per voter, in the order of each voter's last answer.
    pub votes: Vec<Vote<'a>>,
    pub accepts: u32,
    pub rejects: u32,
    pub decision: Option<Decision>,
}

impl Tally<'_> {
    /// The vote that decided: the last counted vote on the winning side.
    pub fn deciding(&self) -> Option<&Vote<'_>> {
        let accept = self.decision? == Decision::Accepted;
        self.votes.iter().rev().find(|v| v.accept == accept)
    }
}

/// Who an answer votes as: `resumeValue.voter`, else who answered.
pub fn voter_of(a: &Answer) -> &str {
    a.value
        .as_ref()
        .and_then(|v| v.get(VOTER))
        .and_then(Value::as_str)
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| a.principal())
}

/// Whether `a` is a vote on an approval offering `allowed`, and if so whether it accepts.
fn vote(a: &Answer, allowed: &[String]) -> Option<bool> {
    let action = a.approval_action()?;
    if !allowed.iter().any(|x| x == action) {
        return None;
    }
    let accept = action != "reject";
    let untrusted = a.content_trust.as_deref() == Some(ContentTrust::Untrusted.as_str());
    (!(accept && untrusted)).then_some(accept)
}

/// The votes among `answers` (answers to one approval, in the order given) on an approval
/// offering `allowed` (empty: accept, reject), and what they decide under `q`.
pub fn tally<'a>(
    q: Quorum,
    allowed: &[String],
    answers: impl IntoIterator<Item = &'a Answer>,
) -> Tally<'a> {
    let default: Vec<String>;
    let allowed = if allowed.is_empty() {
        default = DEFAULT_APPROVAL_ACTIONS.map(str::to_owned).to_vec();
        &default
    } else {
        allowed
    };
    // voter → (position of their last vote, that vote)
    let mut last: BTreeMap<String, (usize, &'a Answer, bool)> = BTreeMap::new();
    for (i, a) in answers.into_iter().enumerate() {
        if let Some(accept) = vote(a, allowed) {
            last.insert(voter_of(a).to_owned(), (i, a, accept));
        }
    }
    let mut votes: Vec<(usize, Vote<'a>)> = last
        .into_iter()
        .map(|(voter, (i, answer, accept))| {
            (
                i,
                Vote {
                    voter,
                    answer,
                    accept,
                },
            )
        })
        .collect();
    votes.sort_by_key(|(i, _)| *i);
    let votes: Vec<Vote<'a>> = votes.into_iter().map(|(_, v)| v).collect();
    let accepts = votes.iter().filter(|v| v.accept).count() as u32;
    let rejects = votes.len() as u32 - accepts;
    let decision = if rejects >= q.rejections_needed() {
        Some(Decision::Rejected)
    } else if accepts >= q.required {
        Some(Decision::Accepted)
    } else {
        None
    };
    Tally {
        votes,
        accepts,
        rejects,
        decision,
    }
}

/// Whether `answers` (a Run's `spec.answers`) decide the pending interrupt `p`: for a quorum
/// approval, when its votes do; for anything else, when any answer names it.
pub fn decided(p: &PendingInterrupt, answers: &[Answer]) -> bool {
    let mine = answers.iter().filter(|a| a.interrupt_id == p.interrupt_id);
    match p.quorum() {
        Some(q) => tally(q, &p.actions, mine).decision.is_some(),
        None => mine.count() > 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn vote_by(voter: &str, action: &str) -> Answer {
        serde_json::from_value(json!({
            "interruptId": "i", "action": action, "value": {"voter": voter}, "answeredBy": "sa"
        }))
        .unwrap()
    }

    fn q(required: u32, policy: RejectionPolicy) -> Quorum {
        Quorum { required, policy }
    }

    #[test]
    fn three_accepts_grant_and_two_rejects_of_three_reject_by_majority() {
        let q3 = q(3, RejectionPolicy::Majority);
        let a = [vote_by("a1", "accept"), vote_by("a2", "accept")];
        let t = tally(q3, &[], &a);
        assert_eq!((t.accepts, t.rejects, t.decision), (2, 0, None));
        let a = [
            vote_by("a1", "accept"),
            vote_by("a2", "accept"),
            vote_by("a3", "accept"),
        ];
        let t = tally(q3, &[], &a);
        assert_eq!(t.decision, Some(Decision::Accepted));
        assert_eq!(t.deciding().unwrap().voter, "a3");
        let r = [vote_by("r1", "reject")];
        assert_eq!(tally(q3, &[], &r).decision, None);
        let r = [vote_by("r1", "reject"), vote_by("r2", "reject")];
        let t = tally(q3, &[], &r);
        assert_eq!(t.decision, Some(Decision::Rejected));
        assert_eq!(t.deciding().unwrap().voter, "r2");
        // single-veto: one reject is enough.
        let r = [vote_by("a1", "accept"), vote_by("r1", "reject")];
        assert_eq!(
            tally(q(3, RejectionPolicy::SingleVeto), &[], &r).decision,
            Some(Decision::Rejected)
        );
        assert_eq!(q(4, RejectionPolicy::Majority).rejections_needed(), 3);
        assert_eq!(q(1, RejectionPolicy::Majority).rejections_needed(), 1);
    }

    #[test]
    fn a_voters_last_vote_counts_and_a_repeat_is_one_vote() {
        let q3 = q(3, RejectionPolicy::Majority);
        let a = [
            vote_by("a1", "accept"),
            vote_by("a1", "accept"),
            vote_by("a1", "accept"),
        ];
        let t = tally(q3, &[], &a);
        assert_eq!((t.votes.len(), t.accepts, t.decision), (1, 1, None));
        let a = [
            vote_by("x", "reject"),
            vote_by("y", "reject"),
            vote_by("x", "accept"),
        ];
        let t = tally(q3, &[], &a);
        assert_eq!((t.accepts, t.rejects, t.decision), (1, 1, None));
        assert_eq!(
            t.votes.iter().map(|v| v.voter.as_str()).collect::<Vec<_>>(),
            ["y", "x"]
        );
    }

    #[test]
    fn answers_that_are_not_votes_do_not_count() {
        let q2 = q(2, RejectionPolicy::SingleVeto);
        let mut untrusted = vote_by("u", "accept");
        untrusted.content_trust = Some("untrusted".into());
        let mut untrusted_reject = vote_by("v", "reject");
        untrusted_reject.content_trust = Some("untrusted".into());
        let none: Answer =
            serde_json::from_value(json!({"interruptId": "i", "value": {"q": 1}})).unwrap();
        let a = [
            untrusted,
            vote_by("w", "refine"),
            none,
            vote_by("ok", "accept"),
        ];
        // refine is not offered by [accept, reject]; the untrusted accept never approves.
        let t = tally(q2, &["accept".into(), "reject".into()], &a);
        assert_eq!((t.accepts, t.rejects, t.decision), (1, 0, None));
        assert_eq!(
            tally(q2, &[], std::slice::from_ref(&untrusted_reject)).decision,
            Some(Decision::Rejected)
        );
        // No voter: who answered votes.
        let by: Answer = serde_json::from_value(
            json!({"interruptId": "i", "action": "accept", "answeredBy": "alice"}),
        )
        .unwrap();
        assert_eq!(voter_of(&by), "alice");
    }

    #[test]
    fn decided_reads_the_pending_interrupts_quorum() {
        let mut p = PendingInterrupt {
            interrupt_id: "i".into(),
            node_id: "gate".into(),
            kind: "approval".into(),
            required_approvals: Some(3),
            rejection_policy: Some("majority".into()),
            ..PendingInterrupt::default()
        };
        let two = [vote_by("a", "accept"), vote_by("b", "accept")];
        assert!(!decided(&p, &two));
        let three = [two[0].clone(), two[1].clone(), vote_by("c", "accept")];
        assert!(decided(&p, &three));
        let other: Vec<Answer> = three
            .iter()
            .cloned()
            .map(|mut a| {
                a.interrupt_id = "other".into();
                a
            })
            .collect();
        assert!(!decided(&p, &other));
        // A plain approval is decided by any answer, as before quorum existed.
        p.required_approvals = None;
        assert!(decided(&p, &two[..1]));
        assert!(!decided(&p, &[]));
    }

    proptest! {
        /// Whatever the order the votes came in, the decision is that of the final vote of
        /// each voter, taken alone.
        #[test]
        fn only_the_final_vote_per_voter_decides(
            required in 1u32..6,
            majority in any::<bool>(),
            history in proptest::collection::vec((0usize..5, prop_oneof![
                Just("accept"), Just("reject"), Just("refine")]), 0..24),
            seed in any::<u64>(),
        ) {
            let policy = if majority { RejectionPolicy::Majority } else { RejectionPolicy::SingleVeto };
            let qq = q(required, policy);
            let allowed: Vec<String> = ["accept", "reject", "refine"].map(String::from).to_vec();
            let answers: Vec<Answer> = history
                .iter()
                .map(|(v, a)| vote_by(&format!("v{v}"), a))
                .collect();
            let full = tally(qq, &allowed, &answers);
            // The final vote per voter, in a shuffled order.
            let mut finals: BTreeMap<String, Answer> = BTreeMap::new();
            for a in &answers {
                finals.insert(voter_of(a).to_owned(), a.clone());
            }
            let mut finals: Vec<Answer> = finals.into_values().collect();
            let mut s = seed;
            for i in (1..finals.len()).rev() {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                finals.swap(i, (s >> 33) as usize % (i + 1));
            }
            let alone = tally(qq, &allowed, &finals);
            prop_assert_eq!(
                (full.accepts, full.rejects, full.decision),
                (alone.accepts, alone.rejects, alone.decision)
            );
            prop_assert!(full.accepts + full.rejects <= 5);
            // Never both: a decision is either side's threshold, rejection first.
            if full.decision == Some(Decision::Accepted) {
                prop_assert!(full.rejects < qq.rejections_needed());
            }
        }
    }
}
