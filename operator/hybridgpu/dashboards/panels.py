"""The panel shapes every hybridgpu dashboard uses, on grafana-foundation-sdk's builders.

Every panel queries the dashboard's ``$datasource`` variable (a Prometheus), so one file
imports into any Grafana whatever its data source is called. Widths of the panels between two
rows add up to 24 (the SDK lays panels out left to right and starts a new line at 24).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from grafana_foundation_sdk.builders import bargauge, gauge, prometheus, stat, timeseries
from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as dashboard_builders
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as dashboard_models

DATASOURCE = dashboard_models.DataSourceRef(type_val="prometheus", uid="${datasource}")
"""Every panel and target queries the data source the dashboard's variable names."""
POOL = 'pool=~"$pool"'
TIER = 'tier=~"$tier"'
"""Matchers of the dashboard variables ``$pool`` and ``$tier``."""
REF_IDS = "ABCDEFGH"


def query(expr: str, legend: str, *, instant: bool = False) -> prometheus.Dataquery:
    """One PromQL target (its refId is set by the panel)."""
    target = prometheus.Dataquery().expr(expr).legend_format(legend).datasource(DATASOURCE)
    return target.instant() if instant else target


def _with_targets(panel: Any, targets: Sequence[prometheus.Dataquery]) -> Any:
    for ref, target in zip(REF_IDS, targets, strict=False):
        panel = panel.with_target(target.ref_id(ref))
    return panel


def _thresholds(steps: Sequence[tuple[float | None, str]]) -> dashboard_builders.ThresholdsConfig:
    return (
        dashboard_builders.ThresholdsConfig()
        .mode(dashboard_models.ThresholdsMode.ABSOLUTE)
        .steps([dashboard_models.Threshold(value=value, color=color) for value, color in steps])
    )


def _last_value() -> common_builders.ReduceDataOptions:
    return common_builders.ReduceDataOptions().calcs(["lastNotNull"]).values(False).fields("")


def stat_panel(
    title: str,
    description: str,
    targets: Sequence[prometheus.Dataquery],
    *,
    unit: str,
    width: int,
    height: int = 4,
    sparkline: bool = False,
    thresholds: Sequence[tuple[float | None, str]] = (),
    mappings: dict[str, str] | None = None,
) -> stat.Panel:
    """A single number (the last value); colored by ``thresholds`` when given.

    ``mappings``: value -> text shown instead of the number.
    """
    panel = (
        stat.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .height(height)
        .span(width)
        .unit(unit)
        .reduce_options(_last_value())
        .graph_mode(common.BigValueGraphMode.AREA if sparkline else common.BigValueGraphMode.NONE)
        .text_mode(common.BigValueTextMode.AUTO)
        .color_mode(
            common.BigValueColorMode.BACKGROUND if thresholds else common.BigValueColorMode.VALUE
        )
    )
    if thresholds:
        panel = panel.thresholds(_thresholds(thresholds))
    if mappings:
        options = {
            value: dashboard_models.ValueMappingResult(text=text, index=index)
            for index, (value, text) in enumerate(mappings.items())
        }
        panel = panel.mappings([dashboard_models.ValueMap(options=options)])
    return _with_targets(panel, targets)  # type: ignore[no-any-return]


def timeseries_panel(
    title: str,
    description: str,
    targets: Sequence[prometheus.Dataquery],
    *,
    unit: str,
    width: int,
    height: int = 8,
    stacked: bool = False,
    counts: bool = False,
    ratio: bool = False,
) -> timeseries.Panel:
    """Lines over time with a table legend (last and max); ``stacked`` areas add up to a
    total; ``counts`` shows whole numbers; ``ratio`` pins the axis to 0-1."""
    panel = (
        timeseries.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .height(height)
        .span(width)
        .unit(unit)
        .draw_style(common.GraphDrawStyle.LINE)
        .line_width(1)
        .fill_opacity(20 if stacked else 0)
        .stacking(
            common_builders.StackingConfig()
            .mode(common.StackingMode.NORMAL if stacked else common.StackingMode.NONE)
            .group("A")
        )
        .span_nulls(False)
        .show_points(common.VisibilityMode.NEVER)
        .legend(
            common_builders.VizLegendOptions()
            .display_mode(common.LegendDisplayMode.TABLE)
            .placement(common.LegendPlacement.BOTTOM)
            .show_legend(True)
            .calcs(["lastNotNull", "max"])
        )
        .tooltip(
            common_builders.VizTooltipOptions()
            .mode(common.TooltipDisplayMode.MULTI)
            .sort(common.SortOrder.DESCENDING)
        )
    )
    if counts:
        panel = panel.decimals(0)
    if ratio:
        panel = panel.min(0).max(1)
    return _with_targets(panel, targets)  # type: ignore[no-any-return]


def dashed_red(panel: timeseries.Panel, series_name: str) -> timeseries.Panel:
    """Draw the series called ``series_name`` (a limit) as a dashed red line."""
    return panel.override_by_name(
        series_name,
        [
            dashboard_models.DynamicConfigValue(
                id_val="color", value={"mode": "fixed", "fixedColor": "red"}
            ),
            dashboard_models.DynamicConfigValue(
                id_val="custom.lineStyle", value={"fill": "dash", "dash": [10, 10]}
            ),
        ],
    )


def gauge_panel(
    title: str,
    description: str,
    targets: Sequence[prometheus.Dataquery],
    *,
    unit: str,
    width: int,
    thresholds: Sequence[tuple[float | None, str]],
    height: int = 8,
) -> gauge.Panel:
    """A dial from 0 to 1 colored by ``thresholds``."""
    panel = (
        gauge.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .height(height)
        .span(width)
        .unit(unit)
        .min(0)
        .max(1)
        .reduce_options(_last_value())
        .thresholds(_thresholds(thresholds))
    )
    return _with_targets(panel, targets)  # type: ignore[no-any-return]


def bars_panel(
    title: str,
    description: str,
    targets: Sequence[prometheus.Dataquery],
    *,
    unit: str,
    width: int,
    height: int = 8,
) -> bargauge.Panel:
    """Horizontal bars, one per series of an instant query (a ranking)."""
    panel = (
        bargauge.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .height(height)
        .span(width)
        .unit(unit)
        .reduce_options(_last_value())
        .orientation(common.VizOrientation.HORIZONTAL)
        .display_mode(common.BarGaugeDisplayMode.GRADIENT)
    )
    return _with_targets(panel, targets)  # type: ignore[no-any-return]


def datasource_variable() -> dashboard_builders.DatasourceVariable:
    return (
        dashboard_builders.DatasourceVariable("datasource").label("Data source").type("prometheus")
    )


def label_variable(name: str, label: str, source: str) -> dashboard_builders.QueryVariable:
    """A multi-value variable over the values of ``name`` on the series ``source``, All
    by default (``.*``)."""
    text = f"label_values({source}, {name})"
    return (
        dashboard_builders.QueryVariable(name)
        .label(label)
        .datasource(DATASOURCE)
        .query({"query": text, "refId": "PrometheusVariableQueryEditor-VariableQuery"})
        .refresh(dashboard_models.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(dashboard_models.VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".*")
        .current(dashboard_models.VariableOption(selected=True, text=["All"], value=["$__all"]))
    )


def new_dashboard(uid: str, title: str, description: str, tags: list[str]) -> Any:
    """A dashboard with the settings every hybridgpu dashboard shares."""
    return (
        dashboard_builders.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(["hybridgpu", *tags])
        .editable()
        .tooltip(dashboard_models.DashboardCursorSync.CROSSHAIR)
        .refresh("1m")
        .time("now-24h", "now")
        .timezone("")
        .with_variable(datasource_variable())
    )


def row(title: str) -> dashboard_builders.Row:
    return dashboard_builders.Row(title)


def to_json(board: dashboard_builders.Dashboard) -> str:
    """The dashboard as Grafana JSON (panels numbered in order), newline-terminated."""
    model = board.build()
    for number, panel in enumerate(model.panels or [], start=1):
        panel.id_val = number
    text = json.dumps(model, cls=JSONEncoder, indent=2, ensure_ascii=False)
    return text + "\n"
