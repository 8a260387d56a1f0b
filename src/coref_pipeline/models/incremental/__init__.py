"""The constant-memory incremental model of Xia, Sedoc and Van Durme (2020).

A document is read one segment at a time. Each segment is encoded, its
candidate spans are scored and pruned with the baseline's span scorer, and the
kept spans, in (start, end) order, are each compared with a bounded list of
active entities:

    score(m, e) = PAIRSCORE(m, e) + s_m(m),   score(m, new entity) = threshold

(``score: paper``), or, with ``score: calibrated``, plus the other terms of the
baseline's antecedent score: s_m of the entity's most recent mention and the
coarse bilinear term (W g_m + b) . e, so that an entity of one mention scores
as the baseline scores that antecedent.

PAIRSCORE is the baseline's fine FFNN with the mention in the target slot and
the entity in the candidate slot (as the authors' code), the speaker feature
replaced by zeros, the segment distance fixed at 0 and the distance bucket
measured in subtokens from the entity's most recent mention
(``pair_features: paper``); ``pair_features: baseline`` computes the baseline's
features with that mention as the antecedent (``PairFeatures``). The argmax
decides, for good: a new entity, or an update ``e <- a e + (1 - a) m``. After
each segment, entities whose most recent mention is far behind leave the active
list (their mentions are kept for the output only).

In training the loss of each window of segments (those whose spans are scored
together) is backpropagated at its end and the entity representations are
detached at each segment's end (truncated backpropagation), so memory does not
grow with the document either.

With ``recent_mentions`` N > 0 each active entity also keeps its N most recent
mentions as scoring columns (each scored as the baseline scores that antecedent);
the entity's score is the best of its columns, and the loss marginalises over the
gold entity's columns. ``entity_representation: false`` scores those mentions
only: with N covering every mention, no eviction, every earlier span among the
baseline's antecedents and ``pair_features: baseline``, the baseline's decisions.

``mention_loss_coef`` adds the baseline's auxiliary mention loss over each
segment's candidate spans (or its kept spans: ``mention_loss_spans: top``) to the
training loss.

How a segment is computed: every column a span can choose is a row of the
segment's table (``memory.SegmentTable``): the entities at the segment's start, the
segment's own spans (each the new entity or the mention slot it may become), and
the representations its updates make. The scores of the spans against the rows
known at the segment's start are computed in one batched pass (``scoring``), the
sequential decisions are taken on the host over them (``decisions``), and the loss
gathers the options each decision had from the passes' graphs, a window of
segments at a time (``loss``): a bounded
number of operator calls and host reads per segment, whatever its spans. Only an
update of a scored representation calls the device during the decisions (its new
version against the later spans). The decisions, losses and gradients are those of
scoring one span at a time, to float rounding.

One idea a module: ``memory`` (entities, columns, eviction, the segment's table),
``features`` (phi), ``gold`` (training targets), ``scoring`` (the batched passes),
``decisions`` (the host's greedy decisions), ``loss`` (the window's loss) and
``model`` (the module, reading a document, the start from the baseline).
"""

from coref_pipeline.models.incremental.features import PairFeatures
from coref_pipeline.models.incremental.gold import GoldAntecedents
from coref_pipeline.models.incremental.memory import EntityMemory, SegmentTable, Span
from coref_pipeline.models.incremental.model import (
    EncodedSegments,
    IncrementalCorefModel,
    IncrementalOutput,
    SegmentSpans,
    copy_baseline_weights,
)
from coref_pipeline.models.incremental.scoring import (
    BASE_SCORE_CHUNK_ELEMENTS,
    INFERENCE_PREFILTER_MARGIN,
    PREFILTER_MARGIN,
    SegmentScores,
)

__all__ = [
    "BASE_SCORE_CHUNK_ELEMENTS",
    "INFERENCE_PREFILTER_MARGIN",
    "PREFILTER_MARGIN",
    "EncodedSegments",
    "EntityMemory",
    "GoldAntecedents",
    "IncrementalCorefModel",
    "IncrementalOutput",
    "PairFeatures",
    "SegmentScores",
    "SegmentSpans",
    "SegmentTable",
    "Span",
    "copy_baseline_weights",
]
