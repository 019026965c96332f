//! Test tools whose inputs have every shape a Rust type gives a schema: nested structs, enums
//! carrying data (externally and internally tagged), `Option` fields, maps, a `u64`, a field
//! with a default, and a recursive type. `plan_trip` has them all (its maps keep it out of
//! OpenAI's strict mode); `book_trip` has all but the maps, so it goes out strict.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use toolgate::schemars::{self, JsonSchema};
use toolgate::{HandlerError, Tool, ToolCtx, ToolHandler, ToolOutcome, ToolSet, serde_json};

/// Plans a trip and answers its itinerary.
#[derive(Tool)]
#[tool(effect = "read")]
pub struct PlanTrip;

/// Books a trip; answers the input it was handed, as the handler saw it.
#[derive(Tool)]
#[tool(effect = "write")]
pub struct BookTrip;

/// A trip to plan.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Trip {
    /// Who travels.
    pub traveller: Traveller,
    /// How they travel.
    pub mode: Mode,
    /// The most it may cost, in cents.
    pub budget_cents: u64,
    /// A note for whoever books it.
    pub note: Option<String>,
    /// Whom to tell about changes.
    pub contact: Option<Contact>,
    /// Free-form labels, by name.
    pub labels: HashMap<String, String>,
    /// Seats wanted, by carriage.
    pub seats: BTreeMap<String, u32>,
    /// The route, as a tree of legs.
    pub route: Leg,
    /// How often to retry a failed booking.
    #[serde(default)]
    pub retries: u32,
    /// What they eat.
    pub meal: Meal,
}

/// A trip to book: a [`Trip`] without its maps.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Booking {
    /// Who travels.
    pub traveller: Traveller,
    /// How they travel.
    pub mode: Mode,
    /// The most it may cost, in cents.
    pub budget_cents: u64,
    /// A note for whoever books it.
    pub note: Option<String>,
    /// Whom to tell about changes.
    pub contact: Option<Contact>,
    /// The route, as a tree of legs.
    pub route: Leg,
    /// How often to retry a failed booking.
    #[serde(default)]
    pub retries: u32,
    /// What they eat.
    pub meal: Meal,
}

/// A person.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Traveller {
    /// Their name.
    #[schemars(length(min = 1))]
    pub name: String,
    /// Where they live.
    pub home: Address,
    /// Their age in years.
    pub age: Option<u8>,
}

/// A postal address.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Address {
    /// The city.
    pub city: String,
    /// The ISO country code.
    #[schemars(regex(pattern = "^[A-Z]{2}$"))]
    pub country: String,
}

/// Someone to tell.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Contact {
    /// Their email address.
    #[schemars(email)]
    pub email: String,
}

/// How to travel.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// On foot.
    Walk,
    /// By train, in a class.
    Train {
        /// 1 or 2.
        #[schemars(range(min = 1, max = 2))]
        class: u8,
    },
    /// By air.
    Flight(Flight),
}

/// A flight.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Flight {
    /// The carrier's code.
    pub carrier: String,
    /// The most stops on the way.
    pub max_stops: i32,
}

/// One leg of a route, with the legs it goes through.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Leg {
    /// Where the leg ends.
    pub to: String,
    /// The legs it goes through.
    pub via: Vec<Leg>,
    /// Another way, if there is one.
    pub alternative: Option<Box<Leg>>,
}

/// A meal preference, tagged by `kind`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Meal {
    /// No meal.
    None,
    /// Vegetarian, strictly or not.
    Vegetarian {
        /// No exceptions.
        strict: bool,
    },
    /// Something else, in words.
    Custom {
        /// What to serve.
        request: String,
    },
}

/// A planned trip.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Itinerary {
    /// The legs in order.
    pub legs: Vec<Leg>,
    /// What it all costs, in cents.
    pub total_cents: u64,
    /// Anything to watch.
    pub warning: Option<String>,
}

#[toolgate::async_trait]
impl ToolHandler for PlanTrip {
    type Input = Trip;
    type Output = Itinerary;

    async fn call(
        &self,
        _ctx: &ToolCtx,
        trip: Trip,
    ) -> Result<ToolOutcome<Itinerary>, HandlerError> {
        Ok(ToolOutcome::output(Itinerary {
            legs: vec![trip.route],
            total_cents: trip.budget_cents / 2,
            warning: trip.note,
        }))
    }

    fn output_schema() -> Option<Value> {
        Some(serde_json::to_value(schemars::schema_for!(Itinerary)).unwrap())
    }
}

#[toolgate::async_trait]
impl ToolHandler for BookTrip {
    type Input = Booking;
    type Output = Booking;

    async fn call(
        &self,
        _ctx: &ToolCtx,
        booking: Booking,
    ) -> Result<ToolOutcome<Booking>, HandlerError> {
        Ok(ToolOutcome::output(booking))
    }
}

/// The example tools and these two.
pub fn tools(data_dir: &std::path::Path) -> ToolSet {
    let mut tools = ToolSet::new();
    toolgate::examples::register(&mut tools, &Default::default(), data_dir).unwrap();
    tools
        .register(PlanTrip)
        .unwrap()
        .register(BookTrip)
        .unwrap();
    tools
}
