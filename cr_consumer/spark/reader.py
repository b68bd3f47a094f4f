"""placeholder"""
from pyspark.sql.datasource import SimpleDataSourceStreamReader
from cr_consumer.spark.offsets import SourceOffset
from cr_consumer.spark.replay import read_range

class CrKafkaStreamReader(SimpleDataSourceStreamReader):
    def __init__(self, options):
        self.options = options
    def initialOffset(self):
        return SourceOffset.initial().to_json()
    def read(self, start):
        return iter([]), start
    def readBetweenOffsets(self, start, end):
        return iter(read_range(self.options, SourceOffset.from_json(start), SourceOffset.from_json(end)))
    def commit(self, end):
        pass
