//! `issue_refund`: a write with a receipt. Refunds up to the approval threshold are issued at
//! once; larger ones wait for a person. The effect is named by its idempotency key,
//! `refund:<order_id>`, and every output matches the declared schema (the receipt an external
//! completion must also carry).

use serde::{Deserialize, Serialize};
use toolgate::schemars::{self, JsonSchema};
use toolgate::{HandlerError, Tool, ToolCtx, ToolHandler, ToolOutcome, serde_json};

/// Refunds an order. Refunds above the approval threshold wait for a person's approval.
#[derive(Debug, Clone, Copy, Tool)]
#[tool(effect = "write")]
pub struct IssueRefund {
    approval_threshold_cents: u64,
}

impl IssueRefund {
    /// A refund tool that asks for approval above `approval_threshold_cents`.
    pub fn new(approval_threshold_cents: u64) -> Self {
        IssueRefund {
            approval_threshold_cents,
        }
    }
}

/// The input of `issue_refund`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RefundRequest {
    /// The order to refund.
    #[schemars(length(min = 1))]
    pub order_id: String,
    /// How much to refund, in cents.
    #[schemars(range(min = 1))]
    pub amount_cents: u64,
    /// Why the refund is made.
    pub reason: String,
}

/// What an approver may add to a large refund.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RefundApproval {
    /// A note kept with the approval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub note: Option<String>,
}

/// The receipt of an issued refund.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Refund {
    /// The payment provider's reference for the refund.
    pub refund_id: String,
    /// The refunded order.
    pub order_id: String,
    /// The amount refunded, in cents.
    pub amount_cents: u64,
    /// Always `issued`.
    pub status: RefundStatus,
}

/// The state of a refund.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RefundStatus {
    /// The provider accepted the refund.
    Issued,
}

#[toolgate::async_trait]
impl ToolHandler for IssueRefund {
    type Input = RefundRequest;
    type Output = Refund;

    async fn call(
        &self,
        ctx: &ToolCtx,
        input: RefundRequest,
    ) -> Result<ToolOutcome<Refund>, HandlerError> {
        if input.amount_cents > self.approval_threshold_cents && ctx.resume().is_none() {
            return Ok(ToolOutcome::suspend_for::<RefundApproval>(format!(
                "A refund of {} for order {} ({}) is above the {} approval threshold.",
                dollars(input.amount_cents),
                input.order_id,
                input.reason,
                dollars(self.approval_threshold_cents)
            )));
        }
        // A real provider would take the idempotency key and return its own reference; this
        // demo derives the reference from the key, so one effect always has one id.
        let key = ctx
            .idempotency_key()
            .map_or_else(|| format!("refund:{}", input.order_id), str::to_owned);
        Ok(ToolOutcome::output(Refund {
            refund_id: format!("rf_{:016x}", fnv1a(key.as_bytes())),
            order_id: input.order_id,
            amount_cents: input.amount_cents,
            status: RefundStatus::Issued,
        }))
    }

    fn output_schema() -> Option<serde_json::Value> {
        Some(serde_json::to_value(schemars::schema_for!(Refund)).unwrap())
    }

    fn idempotency_key(&self, input: &RefundRequest) -> Option<String> {
        Some(format!("refund:{}", input.order_id))
    }
}

/// `cents` as a person reads an amount: `1999900` is `$19,999.00`.
fn dollars(cents: u64) -> String {
    let whole = (cents / 100).to_string();
    let mut grouped = String::with_capacity(whole.len() + whole.len() / 3);
    for (i, digit) in whole.chars().enumerate() {
        if i > 0 && (whole.len() - i).is_multiple_of(3) {
            grouped.push(',');
        }
        grouped.push(digit);
    }
    format!("${grouped}.{:02}", cents % 100)
}

/// FNV-1a, 64 bits: a stable stand-in for a provider's reference.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, b| {
        (hash ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::dollars;

    #[test]
    fn amounts_read_as_dollars() {
        assert_eq!(dollars(0), "$0.00");
        assert_eq!(dollars(5), "$0.05");
        assert_eq!(dollars(10_000), "$100.00");
        assert_eq!(dollars(100_001), "$1,000.01");
        assert_eq!(dollars(1_999_900), "$19,999.00");
        assert_eq!(dollars(u64::MAX), "$184,467,440,737,095,516.15");
    }
}
