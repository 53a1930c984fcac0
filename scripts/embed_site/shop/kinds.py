from dataclasses import dataclass

import operations


@dataclass
class ExportRequest:
    account_id: int


@operations.register("shop.export", request_type=ExportRequest, count_label="rows")
def export(request: ExportRequest, reporter: operations.Reporter):
    tables = ["users", "orders"]
    reporter.set_units(len(tables))
    for table in tables:
        reporter.start_unit(table)
        reporter.advance(21)
        reporter.finish_unit()
    return operations.Result(uri=f"file:///exports/{request.account_id}-{reporter.attempt.id}.zip")
