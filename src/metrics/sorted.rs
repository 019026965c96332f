//! A family of series rendered in the order of their labels.
//!
//! prometheus-client's `Family` keeps its series in a `HashMap` and renders them in its
//! iteration order, which differs from one process to the next and changes as series are
//! added: two scrapes listed the same series in different orders, so a diff of two scrapes (or
//! of a scrape and a recorded one) was noise. This family keeps them in a `BTreeMap`, so each
//! family's series come sorted by their labels (in the order the label set declares them; a
//! number as a number), on every scrape. The families themselves come in the order they are
//! registered.

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError, RwLock};

use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::{MetricType, TypedMetric};

/// Series of the metric `M`, one per label set `S`, each made by `constructor` at its first use.
#[derive(Debug)]
pub(crate) struct SortedFamily<S, M> {
    series: Arc<RwLock<BTreeMap<S, M>>>,
    constructor: fn() -> M,
}

impl<S, M> Clone for SortedFamily<S, M> {
    fn clone(&self) -> Self {
        SortedFamily {
            series: self.series.clone(),
            constructor: self.constructor,
        }
    }
}

impl<S, M: Default> Default for SortedFamily<S, M> {
    fn default() -> Self {
        SortedFamily::new(M::default)
    }
}

impl<S, M> SortedFamily<S, M> {
    /// An empty family whose series `constructor` makes.
    pub(crate) fn new(constructor: fn() -> M) -> Self {
        SortedFamily {
            series: Arc::default(),
            constructor,
        }
    }
}

impl<S: Ord + Clone, M: Clone> SortedFamily<S, M> {
    /// The series of `labels` (a handle on it: counting through it counts in the family),
    /// made now if it is not there yet.
    pub(crate) fn get_or_create(&self, labels: &S) -> M {
        // A metric is only counted through its handle, so a panic while a lock was held left
        // nothing half-written: the poison is ignored.
        if let Some(metric) = self
            .series
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(labels)
        {
            return metric.clone();
        }
        self.series
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(labels.clone())
            .or_insert_with(self.constructor)
            .clone()
    }
}

impl<S, M: TypedMetric> TypedMetric for SortedFamily<S, M> {
    const TYPE: MetricType = M::TYPE;
}

impl<S, M> EncodeMetric for SortedFamily<S, M>
where
    S: EncodeLabelSet,
    M: EncodeMetric + TypedMetric,
{
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let series = self.series.read().unwrap_or_else(PoisonError::into_inner);
        for (labels, metric) in series.iter() {
            metric.encode(encoder.encode_family(labels)?)?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        M::TYPE
    }

    fn is_empty(&self) -> bool {
        self.series
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .is_empty()
    }
}
